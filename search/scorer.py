"""Scorers run a cost model over batches of candidates and say why a candidate is invalid.

`LocalScorer` scores in this process (no isolation: for tests and debugging); `RayScorer` (ray_scorer.py)
scores on crash-isolated Ray actors. Both build their cost model from a `CostModelSpec`.
"""

from __future__ import annotations

import abc
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tvm.target import Target

from ..annotate.candidate import Candidate
from ..costmodel.base import CostModel
from ..errors import InvalidCandidateError
from ..task import Task

log = logging.getLogger(__name__)

# None: the static cost model of the task's target; a CostModel instance; or a factory called with the target
CostModelSpec = CostModel | Callable[[Target], CostModel] | None
KINDS = ("predict", "prescore")


@dataclass(frozen=True)
class Scores:
    """Predicted seconds per candidate (inf = invalid) and, for each invalid one, the reason."""

    seconds: np.ndarray
    reasons: list[str | None]

    @classmethod
    def concat(cls, parts: Sequence[Scores]) -> Scores:
        if not parts:
            return cls(np.zeros(0), [])
        return cls(np.concatenate([p.seconds for p in parts]), [r for p in parts for r in p.reasons])


def build_cost_model(spec: CostModelSpec, target: Target) -> CostModel:
    """The cost model a spec describes, built for `target`."""
    if spec is None:
        from ..costmodel.model import StaticCostModel

        return StaticCostModel(target)
    if isinstance(spec, CostModel):
        return spec
    model = spec(target)
    if not isinstance(model, CostModel):
        raise TypeError(f"cost model factory returned {type(model).__name__}, not a CostModel")
    return model


def model_class(spec: CostModelSpec) -> type | None:
    """The CostModel class a spec builds, when it can be told without building it."""
    if spec is None:
        from ..costmodel.model import StaticCostModel

        return StaticCostModel
    if isinstance(spec, CostModel):
        return type(spec)
    if isinstance(spec, functools.partial):
        spec = spec.func
    return spec if isinstance(spec, type) and issubclass(spec, CostModel) else None


def has_cheap_prescore(spec: CostModelSpec, target: Target) -> bool:
    """Whether prescoring for `target` is cheaper than `predict`: the model overrides `prescore`, and unless
    its class says otherwise with a `prescore_is_cheap(target)` class method, it is. A factory whose product
    cannot be told from the spec (a function or lambda) is called once here to see it."""
    cls = model_class(spec)
    if cls is None and callable(spec):
        cls = type(build_cost_model(spec, target))
    if cls is None or cls.prescore is CostModel.prescore:
        return False
    probe = getattr(cls, "prescore_is_cheap", None)
    return bool(probe(target)) if callable(probe) else True


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}"


def _why_invalid(cand: Candidate) -> str:
    try:
        cand.to_schedule()
    except InvalidCandidateError as err:
        return err.reason
    return "the cost model gave no finite latency (build or analysis failed)"


def score_with_model(model: CostModel, task: Task, cands: Sequence[Candidate], kind: str = "predict") -> Scores:
    """Score `cands` with `model` in this process; an exception of the model costs only its candidate."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not cands:
        return Scores(np.zeros(0), [])
    fn = model.predict if kind == "predict" else model.prescore
    try:
        seconds = np.asarray(fn(task, list(cands)), dtype=np.float64).reshape(-1)
        if seconds.shape != (len(cands),):
            raise ValueError(f"the cost model returned {seconds.shape[0]} scores for {len(cands)} candidates")
    except Exception as err:  # noqa: BLE001 - a model failure is the candidates' failure, never the search's
        if len(cands) == 1:
            log.warning("cost model failed on %s: %s", cands[0], _first_line(err))
            return Scores(np.array([np.inf]), [f"cost model error: {_first_line(err)}"])
        return Scores.concat([score_with_model(model, task, [c], kind) for c in cands])
    seconds = np.where(np.isfinite(seconds) & (seconds > 0), seconds, np.inf)
    reasons = [None if np.isfinite(s) else _why_invalid(c) for c, s in zip(cands, seconds, strict=True)]
    return Scores(seconds, reasons)


class Scorer(abc.ABC):
    """Scores candidates of any task with one kind of cost model; a context manager that frees its workers."""

    spec: CostModelSpec = None

    @abc.abstractmethod
    def score(self, task: Task, cands: Sequence[Candidate], kind: str = "predict") -> Scores: ...

    @functools.cached_property
    def _cheap_prescore(self) -> dict[str, bool]:
        """`prescore_is_cheap` per target: a factory spec is built to answer it, and rounds ask every time."""
        return {}

    def prescore_is_cheap(self, task: Task) -> bool:
        """Whether filtering a larger population by `prescore` pays for this task."""
        key = str(task.target)
        if key not in self._cheap_prescore:
            self._cheap_prescore[key] = has_cheap_prescore(self._prescore_spec(task.target), task.target)
        return self._cheap_prescore[key]

    def _prescore_spec(self, target: Target) -> CostModelSpec:
        """What `prescore_is_cheap` asks: the spec itself (a scorer that holds its models may answer with one)."""
        return self.spec

    def close(self) -> None:
        """Release workers (nothing for an in-process scorer)."""

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalScorer(Scorer):
    """Scores in this process with one model per target; a crash of the model is a crash of the caller."""

    def __init__(self, cost_model: CostModelSpec = None):
        self.spec = cost_model
        self._models: dict[str, CostModel] = {}

    def _model(self, target: Target) -> CostModel:
        key = str(target)
        if key not in self._models:
            self._models[key] = build_cost_model(self.spec, target)
        return self._models[key]

    def score(self, task: Task, cands: Sequence[Candidate], kind: str = "predict") -> Scores:
        return score_with_model(self._model(task.target), task, cands, kind)

    def _prescore_spec(self, target: Target) -> CostModelSpec:
        """A factory whose product the spec does not tell is asked through the model this scorer then scores with,
        so it is built once, not twice."""
        return self.spec if model_class(self.spec) is not None else self._model(target)


class DeferredScorer(Scorer):
    """A scorer made by `make` on first use (or `start()`): a run whose budget is already spent, resumed to build,
    verify or export, starts no Ray. `start_in_background()` makes it in a thread meanwhile (Ray's start takes
    seconds that importing the model can hide)."""

    # Linux sends a child its parent-death signal when the *thread* that started it ends, so the thread that
    # starts Ray's local processes (raylet, object store) idles until exit instead of ending: they live on.
    _keep_alive = threading.Event()

    def __init__(self, make: Callable[[], Scorer]):
        self._make = make
        self._inner: Scorer | None = None
        self._made: threading.Event | None = None
        self._error: BaseException | None = None

    def start_in_background(self) -> None:
        if self._inner is None and self._made is None:
            self._made = threading.Event()
            threading.Thread(target=self._make_in_thread, name="drytune-scorer-start", daemon=True).start()

    def _make_in_thread(self) -> None:
        try:
            self._inner = self._make()
        except BaseException as err:  # raised again by start(), in the caller's thread
            self._error = err
        finally:
            self._made.set()
        self._keep_alive.wait()

    def start(self) -> Scorer:
        if self._made is not None:
            self._made.wait()
            self._made = None
            if self._error is not None:
                err, self._error = self._error, None
                raise err
        if self._inner is None:
            self._inner = self._make()
        return self._inner

    def score(self, task: Task, cands: Sequence[Candidate], kind: str = "predict") -> Scores:
        return self.start().score(task, cands, kind)

    def prescore_is_cheap(self, task: Task) -> bool:
        return self.start().prescore_is_cheap(task)

    def close(self) -> None:
        if self._made is not None:
            self._made.wait()
        if self._inner is not None:
            self._inner.close()


def make_scorer(cost_model: CostModelSpec = None, *, num_workers: int | None = None,
                ray_address: str | None = None) -> Scorer:
    """Ray actors (`num_workers`, default one per CPU; a cluster by `ray_address` / $RAY_ADDRESS), or this
    process without isolation when `num_workers == 0`."""
    if num_workers == 0:
        return LocalScorer(cost_model)
    from .ray_scorer import RayScorer

    return RayScorer(cost_model, num_workers=num_workers, ray_address=ray_address)
