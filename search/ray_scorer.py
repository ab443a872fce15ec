"""`RayScorer`: scores candidates on Ray actors, one cost model per actor, crash-isolated.

Each actor builds its own cost model and caches the tasks it is sent (a task and its sketches travel once
through the object store; batches are lists of (sketch name, decisions)). A bounded number of batches is in
flight per actor. A batch that kills its actor (segfault, abort) or runs past its time limit is split into
single candidates and retried; a single candidate that does so again is invalid, with the reason, and the
actor is replaced. Without an address an embedded local Ray is started quietly and shut down at exit.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..annotate.candidate import Candidate
from ..errors import DrytuneError
from ..sketch.sketch import Sketch
from ..task import Task
from .config import ScorerConfig
from .scorer import CostModelSpec, Scorer, Scores, build_cost_model, score_with_model

log = logging.getLogger(__name__)

_started_ray = False  # whether this process started the Ray it uses (then it shuts it down at exit)
_TASK_CACHE = 8  # tasks an actor keeps


class ScorerError(DrytuneError):
    """The scoring workers cannot run at all (e.g. the cost model fails to build in every new actor)."""


def connect(ray_address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `ray_address` (or $RAY_ADDRESS), or start an embedded local one quietly.

    Already connected: a cluster asked for replaces the embedded Ray this process started; a connection
    made by someone else to another cluster is an error.
    """
    global _started_ray
    import ray

    address = ray_address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if not address or _same_address(address, current):
            return
        if not _started_ray:
            raise ScorerError(f"this process is connected to the Ray cluster at {current}; it cannot also join "
                              f"{address} (call ray.shutdown() first)")
        ray.shutdown()
        _started_ray = False
    ray_log = logging.getLogger("ray")
    level = ray_log.level
    ray_log.setLevel(logging.ERROR)  # start-up notices (token authentication, ...) are not ours to show
    try:
        if address:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        else:
            # All local CPUs, at least: the process may later ask for more workers than its first scorer did.
            ray.init(num_cpus=max(num_cpus or 1, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            _started_ray = True
            atexit.register(_shutdown)
    finally:
        ray_log.setLevel(level)


def _same_address(address: str, gcs_address: str) -> bool:
    """Whether the user's cluster address names the GCS this process is connected to."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        wanted = canonicalize_bootstrap_address(address)
    except (ValueError, ConnectionError):
        return False
    if wanted is None:  # "local": the embedded Ray serves
        return _started_ray
    (host, _, port), (cur_host, _, cur_port) = wanted.rpartition(":"), gcs_address.rpartition(":")
    try:
        return port == cur_port and socket.gethostbyname(host) == socket.gethostbyname(cur_host)
    except OSError:
        return False


def _shutdown() -> None:
    import ray

    if _started_ray and ray.is_initialized():
        ray.shutdown()


class _ScoreWorker:
    """Body of one Ray actor: a cost model per target and the tasks it was sent."""

    def __init__(self, spec: CostModelSpec):
        self.spec = spec
        self.models: dict[str, Any] = {}
        self.tasks: collections.OrderedDict[str, tuple[Task, dict[str, Sketch]]] = collections.OrderedDict()

    def ping(self) -> int:
        return os.getpid()

    def score(self, token: str, payload: list, kind: str, items: list[tuple[str, dict]]) -> tuple[list | None, Any]:
        import ray

        if token not in self.tasks:
            task, sketches = ray.get(payload[0])  # wrapped in a list so that Ray does not resolve it every call
            self.tasks[token] = (task, {s.name: s for s in sketches})
            while len(self.tasks) > _TASK_CACHE:
                self.tasks.popitem(last=False)
        task, sketches = self.tasks[token]
        key = str(task.target)
        if key not in self.models:
            try:
                self.models[key] = build_cost_model(self.spec, task.target)
            except Exception as err:  # noqa: BLE001 - reported to the driver, which stops: no candidate can score
                return None, f"{type(err).__name__}: {err}"
        cands = [Candidate(task, sketches[name], decisions) for name, decisions in items]
        scores = score_with_model(self.models[key], task, cands, kind)
        return scores.seconds.tolist(), scores.reasons


@dataclass
class _Payload:
    task: Task
    sketches: dict[str, Sketch]
    token: str
    ref: Any


@dataclass
class _Job:
    indices: list[int]
    ref: Any = None
    head_since: float | None = None  # when it became the first job of its actor's queue


@dataclass
class _Worker:
    handle: Any
    queue: collections.deque = field(default_factory=collections.deque)  # of _Job; the ping job first
    ready: bool = False


class RayScorer(Scorer):
    """Scores batches on `num_workers` actors (default: one per CPU of the cluster)."""

    def __init__(self, cost_model: CostModelSpec = None, *, num_workers: int | None = None,
                 ray_address: str | None = None, config: ScorerConfig | None = None):
        import ray

        connect(ray_address, num_workers)
        self.config = config or ScorerConfig()
        self.spec = cost_model
        n = num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._actor_cls = ray.remote(num_cpus=1, max_restarts=0)(_ScoreWorker)
        self.workers = [self._start() for _ in range(n)]
        self._payloads: dict[int, _Payload] = {}
        self.replaced = 0
        self._failed_starts = 0
        self._last_start_error = ""

    # ------------------------------------------------------------------ actors

    def _start(self) -> _Worker:
        handle = self._actor_cls.remote(self.spec)
        worker = _Worker(handle)
        worker.queue.append(_Job([], ref=handle.ping.remote(), head_since=time.monotonic()))
        return worker

    def _replace(self, worker: _Worker) -> _Worker:
        import ray

        ray.kill(worker.handle, no_restart=True)
        self.replaced += 1
        return self._start()

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for w in self.workers:
            ray.kill(w.handle, no_restart=True)
        self.workers = []

    # ------------------------------------------------------------------ scoring

    def _payload(self, task: Task, cands: Sequence[Candidate]) -> _Payload:
        import ray

        sketches = {c.sketch.name: c.sketch for c in cands}
        p = self._payloads.get(id(task))
        if p is None or p.task is not task or any(p.sketches.get(n) is not s for n, s in sketches.items()):
            merged = {**(p.sketches if p is not None and p.task is task else {}), **sketches}
            p = _Payload(task, merged, uuid.uuid4().hex, ray.put((task, list(merged.values()))))
            self._payloads[id(task)] = p
        return p

    def score(self, task: Task, cands: Sequence[Candidate], kind: str = "predict") -> Scores:
        """Scores of `cands` in order; never raises for a candidate's crash or hang."""
        import ray

        if not self.workers:
            raise ScorerError("the scorer is closed")
        seconds = np.full(len(cands), np.inf)
        reasons: list[str | None] = [None] * len(cands)
        if not cands:
            return Scores(seconds, reasons)
        payload = self._payload(task, cands)
        items = [(c.sketch.name, c.decisions) for c in cands]
        batch = self.config.batch_size if kind == "predict" else self.config.prescore_batch_size
        size = max(1, min(batch, -(-len(cands) // len(self.workers))))  # every actor gets work
        todo = collections.deque(_Job(list(range(i, min(i + size, len(cands))))) for i in range(0, len(cands), size))

        def fail(job: _Job, reason: str) -> None:
            if len(job.indices) > 1:  # find the culprit: retry its candidates one by one
                todo.extendleft(_Job([i]) for i in reversed(job.indices))
            else:
                seconds[job.indices[0]], reasons[job.indices[0]] = np.inf, reason
                log.warning("candidate %s is invalid: %s", cands[job.indices[0]], reason)

        while todo or any(w.queue for w in self.workers):
            placed = True
            while todo and placed:  # one batch per actor in turn, up to a bounded number queued on each
                placed = False
                for w in self.workers:
                    if todo and len(w.queue) < self.config.in_flight_per_worker + (0 if w.ready else 1):
                        job = todo.popleft()
                        job.ref = w.handle.score.remote(payload.token, [payload.ref], kind,
                                                        [items[i] for i in job.indices])
                        job.head_since = time.monotonic() if not w.queue else None
                        w.queue.append(job)
                        placed = True
            refs = [j.ref for w in self.workers for j in w.queue]
            done, _ = ray.wait(refs, num_returns=1, timeout=self._wait_s())
            if done:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            done_set = set(done)
            now = time.monotonic()
            for k, w in enumerate(self.workers):
                while w.queue and w.queue[0].ref in done_set:
                    job = w.queue.popleft()
                    try:
                        result = ray.get(job.ref)
                    except ray.exceptions.RayError as err:
                        if isinstance(err, ray.exceptions.RayActorError) or not job.indices:
                            self.workers[k] = self._on_death(w, job, _short(err), todo, fail)
                            break
                        fail(job, f"scoring failed: {_short(err)}")
                    else:
                        self._on_result(w, job, result, seconds, reasons)
                    if w.queue:
                        w.queue[0].head_since = now
                else:
                    if w.queue and now - w.queue[0].head_since > self._limit(w.queue[0]):
                        job = w.queue.popleft()
                        why = f"timeout after {self._limit(job):g} s"
                        self.workers[k] = self._on_death(w, job, why, todo, fail)
        return Scores(seconds, reasons)

    def _on_result(self, w: _Worker, job: _Job, result: Any, seconds: np.ndarray, reasons: list) -> None:
        if not job.indices:  # the ping: the actor is up
            w.ready = True
            self._failed_starts = 0
            return
        secs, why = result
        if secs is None:
            raise ScorerError(f"the cost model cannot be built in a worker: {why}")
        for i, s, r in zip(job.indices, secs, why, strict=True):
            seconds[i], reasons[i] = s, r

    def _on_death(self, w: _Worker, job: _Job, why: str, todo: collections.deque, fail) -> _Worker:
        """The actor died (or hung) on `job`: blame it, requeue the actor's other jobs, start a replacement."""
        if not job.indices:
            self._failed_starts += 1
            self._last_start_error = why
            if self._failed_starts >= self.config.max_failed_starts:
                raise ScorerError(f"cost model workers fail to start: {why}")
        else:
            fail(job, f"worker crashed: {why}" if not why.startswith("timeout") else why)
        todo.extendleft(j for j in reversed(w.queue) if j.indices)
        w.queue.clear()
        return self._replace(w)

    def _limit(self, job: _Job) -> float:
        if not job.indices:
            return self.config.startup_timeout_s
        return self.config.timeout_s_per_candidate * len(job.indices)

    def _wait_s(self) -> float:
        """Seconds until the first deadline of a job at the head of an actor's queue."""
        now = time.monotonic()
        waits = [w.queue[0].head_since + self._limit(w.queue[0]) - now for w in self.workers if w.queue]
        return max(0.05, min(waits)) if waits else 0.05


def _short(err: BaseException) -> str:
    """One line on why a Ray call failed; for a dead actor, its process's exit type and detail."""
    text = " ".join(str(err).split())
    exit_type = re.search(r"Worker exit type: (\w+)", text)
    if exit_type:
        detail = re.search(r"Worker exit detail: (.*?\.)(?: |$)", text)
        return f"its process died ({exit_type.group(1)}{': ' + detail.group(1) if detail else ''})"
    return f"{type(err).__name__}: {text[:300]}"
