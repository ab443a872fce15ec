"""Tuning on a real two-node Ray cluster (two `ray start` nodes on this machine): both nodes score candidates."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from ray_cluster import free_port, node_recording_model, scored_per_node

import drytune as dt
from drytune import workloads
from drytune.records import RecordStore, candidate_from_trace
from drytune.search.ray_scorer import ScorerError, connect
from drytune.verify import check_candidate, random_inputs, run_module


def test_joining_a_cluster_replaces_the_embedded_ray_and_refuses_another(ray_cluster: str, monkeypatch) -> None:
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray.shutdown()
    connect()  # an embedded Ray, as an earlier tune() without an address leaves behind
    embedded = ray.get_runtime_context().gcs_address
    connect(ray_cluster)
    assert ray.get_runtime_context().gcs_address != embedded and len(ray.nodes()) == 2
    connect(ray_cluster)  # already there
    with pytest.raises(ScorerError, match="cannot also join"):
        connect(f"127.0.0.1:{free_port()}")
    assert len(ray.nodes()) == 2


def test_tune_on_two_node_cluster_scores_on_both_nodes(ray_cluster: str, tmp_path) -> None:
    import ray

    task = workloads.small("gemm").task()
    scored_dir, work = str(tmp_path / "scored"), str(tmp_path / "work")
    result = dt.tune(task, trials=16, ray_address=ray_cluster, num_workers=2, work_dir=work,
                     cost_model=node_recording_model(scored_dir), progress=False)

    assert ray.is_initialized() and len(ray.nodes()) == 2  # the driver joined our cluster, no embedded Ray
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    predicted = scored_per_node(scored_dir, "predict")
    assert set(predicted) == nodes, f"candidates scored per node: {dict(predicted)}; cluster nodes: {nodes}"
    assert sum(predicted.values()) == result.trials == 16
    assert set(scored_per_node(scored_dir, "prescore")) <= nodes

    space = dt.SearchSpace(task)
    recorded = [candidate_from_trace(task, space.sketches, r.trace) for r in RecordStore(work).records(task)]
    assert None not in recorded and len(recorded) == result.trials - len(result.invalid)
    assert not [k for k, n in collections.Counter(c.key for c in recorded).items() if n > 1]
    assert result.best.key in {c.key for c in recorded}
    assert np.isfinite(result.predicted) and result.check == "output matches the unscheduled program"
    reference = run_module(task.mod, task, random_inputs(task))
    assert check_candidate(task, result.best, reference=reference).ok


def test_tune_network_on_two_node_cluster(ray_cluster: str, tmp_path) -> None:
    """The whole-network tuner on the cluster: both nodes score, the built network matches torch."""
    pytest.importorskip("torch")
    import ray

    from drytune import zoo
    from drytune.scheduler.config import NetworkTuneConfig

    model, inputs = zoo.get_model("bert_tiny")
    scored_dir = str(tmp_path / "scored")
    net = dt.tune_network(model, inputs, budget="32 trials", ray_address=ray_cluster, num_workers=2,
                          work_dir=str(tmp_path / "work"), cost_model=node_recording_model(scored_dir),
                          progress=False, config=NetworkTuneConfig(round_size=8))
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    predicted = scored_per_node(scored_dir, "predict")
    assert set(predicted) == nodes, f"candidates scored per node: {dict(predicted)}; cluster nodes: {nodes}"
    assert sum(s.trials for s in net.states) == 32
    assert "matches the reference" in net.check
    got = net.run(*[x.numpy() for x in inputs])
    np.testing.assert_allclose(got[0], model(*inputs).detach().numpy(), rtol=1e-3, atol=1e-3)
