"""Test support: a real multi-node Ray cluster on this one machine, started with `ray start` and stopped by us.

Every node is a `ray start --block` process in a session of its own, with its own CPU, memory and
object-store budget, and all nodes share a private temp dir. Nodes are started on the loopback address,
which Ray 2.60 on Linux replaces by the machine's own: either way nodes and driver agree on one address.
Teardown signals only our sessions (never `ray stop`, which stops every Ray on the machine); a node whose
test process dies is told by the kernel (parent-death signal) to shut down.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"

# Runs in the node's own session: asks the kernel for SIGTERM when the test process dies, then becomes `ray start`.
# (The kernel signals when the starting thread ends: start clusters from a thread that outlives them.)
_FATE_SHARE = """
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("the test process is gone")
os.execv(sys.argv[2], sys.argv[2:])
"""

# A short-lived driver: waits until `n` nodes are alive and prints their ids.
_WAIT_NODES = """
import json, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + float(sys.argv[3])
while True:
    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    if len(alive) >= int(sys.argv[2]) or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps(alive))
"""


@dataclass(frozen=True)
class ClusterConfig:
    """Resources of each node and the time limits of starting and stopping the cluster."""

    memory: int = 2_000_000_000  # bytes of task memory each node offers (else each claims the whole machine)
    object_store_memory: int = 300_000_000  # bytes
    start_timeout_s: float = 120.0  # for all nodes to be up
    stop_timeout_s: float = 30.0  # for a node to shut down after SIGTERM, before SIGKILL


class ClusterError(RuntimeError):
    """The local cluster did not come up; the message carries the tail of the nodes' logs."""


@dataclass
class _Node:
    proc: subprocess.Popen
    log_path: str


def free_port() -> int:
    """A TCP port of the loopback interface that is free now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _ray_executable() -> str:
    found = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if found is None:
        raise ClusterError("no `ray` executable next to this Python or on PATH")
    return found


def _node_env() -> dict[str, str]:
    """The environment of our nodes: this process's, with its token-authentication mode (see `_auth_mode`)."""
    env = dict(os.environ, RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    return env


@contextlib.contextmanager
def _auth_mode() -> Iterator[None]:
    """Pin RAY_AUTH_MODE in this process (to "disabled" if unset) while our cluster lives.

    Nodes and drivers must agree on token authentication: a driver in token mode is accepted by nodes
    without it, but the actors it creates are silently cancelled. Ray 2.60 decides the mode when unset
    differently per process: a `ray start --head` that finds ~/.ray/auth_token and an embedded `ray.init()`
    turn it on (the latter for the rest of its process), a driver or node joining an address leaves it off.
    """
    was_set = "RAY_AUTH_MODE" in os.environ
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        yield
    finally:
        if not was_set:
            os.environ.pop("RAY_AUTH_MODE", None)


def _session_pids(sid: int) -> list[int]:
    """Processes of session `sid` (a node's processes, wherever they were re-parented)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state ppid pgrp session ...
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def _tail(path: str, chars: int = 3000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError as err:
        return f"(no log: {err})"


class _Cluster:
    """The nodes started so far; `stop` ends them all and waits until none of their processes is left."""

    def __init__(self, config: ClusterConfig, cpus_per_node: int):
        self.config = config
        self.cpus_per_node = cpus_per_node
        self.temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Unix socket paths are limited
        self.env = _node_env()
        self.ray = _ray_executable()
        self.nodes: list[_Node] = []

    def start_node(self, role_args: list[str]) -> _Node:
        log_path = os.path.join(self.temp_dir, f"node{len(self.nodes)}.log")
        args = [self.ray, "start", "--block", *role_args, f"--node-ip-address={LOOPBACK}",
                f"--num-cpus={self.cpus_per_node}", f"--memory={self.config.memory}",
                f"--object-store-memory={self.config.object_store_memory}", f"--temp-dir={self.temp_dir}",
                f"--dashboard-agent-listen-port={free_port()}", "--disable-usage-stats"]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-c", _FATE_SHARE, str(os.getpid()), *args], env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        node = _Node(proc, log_path)
        self.nodes.append(node)
        return node

    def wait_started(self, node: _Node, deadline: float) -> None:
        """Until `ray start` says the node runs (the head must be up before workers can join it)."""
        while "Ray runtime started" not in _tail(node.log_path, 1 << 20):
            if node.proc.poll() is not None:
                raise ClusterError(f"a node exited with {node.proc.returncode}:\n{_tail(node.log_path)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"a node did not start in time:\n{_tail(node.log_path)}")
            time.sleep(0.1)

    def wait_alive(self, address: str, n: int, deadline: float) -> list[str]:
        """Ids of the alive nodes, once `n` are (asked of the cluster by a short-lived driver)."""
        left = max(1.0, deadline - time.monotonic())
        try:
            out = subprocess.run([sys.executable, "-c", _WAIT_NODES, address, str(n), str(left)], env=self.env,
                                 capture_output=True, text=True, timeout=left + 60)
        except subprocess.TimeoutExpired as err:
            raise ClusterError(f"no answer from the cluster at {address}:\n{self.logs()}") from err
        if out.returncode != 0:
            raise ClusterError(f"cannot query the cluster at {address}:\n{out.stderr[-3000:]}\n{self.logs()}")
        alive = json.loads(out.stdout.strip().splitlines()[-1])
        if len(alive) < n:
            raise ClusterError(f"{len(alive)} of {n} nodes alive at {address}:\n{self.logs()}")
        return alive

    def logs(self) -> str:
        return "\n".join(f"--- node {i}:\n{_tail(node.log_path)}" for i, node in enumerate(self.nodes))

    def stop(self) -> None:
        """SIGTERM each node (workers first: `ray start --block` stops its processes), SIGKILL what outlives it."""
        for node in reversed(self.nodes):
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.stop_timeout_s
        for node in reversed(self.nodes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(max(0.1, deadline - time.monotonic()))
        left = []
        for node in self.nodes:
            while (pids := _session_pids(node.proc.pid)) and time.monotonic() < deadline + 10:
                if time.monotonic() > deadline:
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                time.sleep(0.1)
            left += pids
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(1)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        if left:
            raise ClusterError(f"processes of our Ray nodes survive SIGKILL: {left}")


def _disconnect_driver(port: int) -> None:
    """Disconnect this process's Ray driver if it is connected to the cluster on `port` (which is going away)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    if ray.get_runtime_context().gcs_address.rsplit(":", 1)[-1] == str(port):
        ray.shutdown()


@contextlib.contextmanager
def local_cluster(nodes: int = 2, cpus_per_node: int = 1, config: ClusterConfig | None = None) -> Iterator[str]:
    """A Ray cluster of `nodes` nodes on this machine; yields its address "127.0.0.1:<port>".

    On exit (also after an error) this process's driver leaves the cluster, if it joined it, and every
    process of our nodes is stopped; other Ray instances on the machine are left alone.
    """
    if nodes < 1 or cpus_per_node < 1:
        raise ValueError(f"need at least one node and one CPU per node, got {nodes} and {cpus_per_node}")
    config = config or ClusterConfig()
    port = free_port()
    address = f"{LOOPBACK}:{port}"
    with _auth_mode():
        cluster = _Cluster(config, cpus_per_node)
        try:
            deadline = time.monotonic() + config.start_timeout_s
            head = cluster.start_node(["--head", f"--port={port}", "--include-dashboard=false",
                                       f"--dashboard-port={free_port()}"])
            cluster.wait_started(head, deadline)
            for _ in range(nodes - 1):
                cluster.start_node([f"--address={address}"])
            cluster.wait_alive(address, nodes, deadline)
            yield address
        finally:
            try:
                _disconnect_driver(port)
            finally:
                cluster.stop()


# ------------------------------------------------------------------------------ which nodes scored candidates


def node_recording_model(record_dir: str) -> Callable:
    """A cost-model factory for `tune(cost_model=...)`: the static model, which also appends the Ray node id,
    kind ("predict" or "prescore") and size of every batch it scores to a file of `record_dir` (one per process)."""
    from drytune.costmodel.model import StaticCostModel

    class NodeRecordingModel(StaticCostModel):  # defined here so that Ray ships it by value to the nodes
        def _record(self, kind: str, candidates) -> None:
            import ray

            node = ray.get_runtime_context().get_node_id()
            with open(os.path.join(record_dir, f"{os.getpid()}.txt"), "a") as f:
                f.write(f"{node} {kind} {len(candidates)}\n")

        def predict(self, task, candidates):
            self._record("predict", candidates)
            return super().predict(task, candidates)

        def prescore(self, task, candidates):
            self._record("prescore", candidates)
            return super().prescore(task, candidates)

    os.makedirs(record_dir, exist_ok=True)
    return functools.partial(NodeRecordingModel)  # a partial of the class: the tuner still sees its prescore


def scored_per_node(record_dir: str, kind: str = "predict") -> collections.Counter[str]:
    """Candidates scored by `kind` per Ray node id, from the files of `node_recording_model`."""
    counts: collections.Counter[str] = collections.Counter()
    for name in os.listdir(record_dir):
        with open(os.path.join(record_dir, name)) as f:
            for line in f:
                node, k, n = line.split()
                if k == kind:
                    counts[node] += int(n)
    return counts
