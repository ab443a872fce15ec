"""Whole-network tuning on small models: real import, task scheduler, records, build, numeric check, export."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")

from drytune import zoo  # noqa: E402
from drytune.records import RecordStore  # noqa: E402
from drytune.scheduler.budget import BudgetError  # noqa: E402
from drytune.scheduler.config import NetworkTuneConfig  # noqa: E402
from drytune.scheduler.report import load_report  # noqa: E402
from drytune.scheduler.tune_network import tune_network  # noqa: E402
from drytune.scheduler.workdir import read_rounds  # noqa: E402

SMALL = NetworkTuneConfig(round_size=8)


def record_keys(work_dir: str) -> list[str]:
    with open(os.path.join(work_dir, "database_tuning_record.json")) as f:
        return [json.dumps(json.loads(line)[:2]) for line in f if line.strip()]


@pytest.fixture(scope="module")
def resnet_tiny():
    return zoo.get_model("resnet_tiny")


@pytest.fixture(scope="module")
def tuned(resnet_tiny, tmp_path_factory):
    work = str(tmp_path_factory.mktemp("resnet_tiny"))
    model, inputs = resnet_tiny
    net = tune_network(model, inputs, target="llvm", budget="96 trials", work_dir=work, num_workers=0,
                       progress=False, config=SMALL)
    return net, work


def test_tuned_network_matches_torch_and_uses_its_records(tuned, resnet_tiny) -> None:
    net, work = tuned
    assert "matches the reference" in net.check
    model, inputs = resnet_tiny
    import torch

    with torch.no_grad():
        want = model(*inputs).numpy()
    got = net.run(*[x.numpy() for x in inputs])
    np.testing.assert_allclose(got[0], want, rtol=1e-3, atol=1e-3)
    tuned_names = {c.name for c in net.built.choices if c.record is not None}
    assert tuned_names, "no task got a tuned schedule"
    from drytune.scheduler.build import applied_tasks

    assert tuned_names <= applied_tasks(net.built.module)
    rounds = read_rounds(work)
    assert sum(r.trials for r in rounds) == 96
    assert net.phase_seconds["predict"] > 0 and sum(net.phase_seconds.values()) <= sum(r.seconds for r in rounds)
    assert len(set(record_keys(work))) == len(record_keys(work))  # nothing recorded twice


def test_report_table_and_curve(tuned, tmp_path) -> None:
    net, work = tuned
    report = net.report()
    assert [r.name for r in report.rows] == [t.name for t in net.tasks]
    assert sum(r.trials for r in report.rows) == 96
    assert report.predicted_total > 0
    text = report.table()
    assert all(t.name[:60] in text for t in net.tasks)
    png = report.plot(str(tmp_path / "curve.png"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert subprocess.run([sys.executable, "-m", "drytune", "report", work, "--png", str(tmp_path / "c2.png")],
                          capture_output=True, text=True, check=True).stdout.count("\n") >= len(net.tasks) + 3


def test_exported_library_runs_in_a_fresh_process(tuned, resnet_tiny, tmp_path) -> None:
    net, _ = tuned
    lib = net.export(str(tmp_path / "net.so"))
    x = resnet_tiny[1][0].numpy()
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, numpy as np, tvm\nfrom tvm import relax\n"
        f"vm = relax.VirtualMachine(tvm.runtime.load_module({lib!r}), tvm.cpu())\n"
        f"out = vm['main'](tvm.runtime.tensor(np.load({str(tmp_path / 'x.npy')!r})))\n"
        "out = out[0] if not hasattr(out, 'numpy') else out\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, out.numpy())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), net.run(x)[0], rtol=1e-5, atol=1e-6)


def test_task_budgets_skip_cap_and_minimum(resnet_tiny, tmp_path) -> None:
    model, inputs = resnet_tiny
    from drytune.scheduler.tune_network import prepare

    _, _, _, tasks, _ = prepare(model, inputs, "llvm")
    heavy = max(range(len(tasks)), key=lambda i: tasks[i].flops)
    light = min(range(len(tasks)), key=lambda i: tasks[i].flops)
    budgets = {"budget": "64 trials", "tasks": {heavy: {"skip": True}, light: {"min_trials": 24}}}
    work = str(tmp_path / "w")
    net = tune_network(model, inputs, budget=None, task_budgets=budgets, work_dir=work, num_workers=0,
                       progress=False, config=SMALL)
    by_task = {s.name: s for s in net.states}
    assert by_task[tasks[heavy].name].trials == 0 and by_task[tasks[heavy].name].done.startswith("skipped")
    assert by_task[tasks[light].name].trials >= 24 or by_task[tasks[light].name].done == "search space exhausted"
    assert RecordStore(work).records(tasks[heavy].task) == []
    assert "matches the reference" in net.check
    with pytest.raises(BudgetError, match=tasks[heavy].name):
        tune_network(model, inputs, task_budgets={"no_such_task*": {"max_trials": 1}}, work_dir=str(tmp_path / "x"),
                     num_workers=0, progress=False)


def test_records_of_another_target_are_ignored(resnet_tiny, tuned, tmp_path, caplog) -> None:
    import shutil

    _, work = tuned
    other = str(tmp_path / "copy")
    shutil.copytree(work, other)
    model, inputs = resnet_tiny
    with caplog.at_level(logging.WARNING):
        net = tune_network(model, inputs, target="x86-avx2", budget="0 trials", work_dir=other, num_workers=0,
                           progress=False)
    assert all(c.record is None for c in net.built.choices)
    assert "ignoring" in caplog.text


def test_killed_run_resumes_with_its_spent_budget(tmp_path) -> None:
    work = str(tmp_path / "w")
    cmd = [sys.executable, "-m", "drytune", "tune", "resnet_tiny", "--budget", "48 trials", "--num-workers", "0",
           "--work-dir", work, "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(read_rounds(work)) < 3 and proc.poll() is None:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    spent = sum(r.trials for r in read_rounds(work))
    assert 0 < spent < 48
    subprocess.run(cmd, check=True, capture_output=True)
    rounds = read_rounds(work)
    assert sum(r.trials for r in rounds) == 48
    keys = record_keys(work)
    assert len(keys) == len(set(keys))
    assert load_report(work).rows


def test_embedded_ray_started_while_the_model_imports_lives_through_the_run(tmp_path) -> None:
    """A fresh process: Ray is started in a background thread, which then ends its work; Ray's processes must
    outlive that thread (Linux's parent-death signal follows the thread) and score every round."""
    work = str(tmp_path / "w")
    cmd = [sys.executable, "-m", "drytune", "tune", "resnet_tiny", "--budget", "48 trials", "--num-workers", "1",
           "--work-dir", work, "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sum(r.trials for r in read_rounds(work)) == 48


def test_cuda_network_builds_with_every_function_scheduled(tmp_path) -> None:
    """Cross-compiled for a GPU (no GPU here): tuned tasks from records, the rest from default schedules that bind
    threads; the CUDA build fails if any PrimFunc is left unbound."""
    from drytune.scheduler.build import applied_tasks

    model, inputs = zoo.get_model("bert_tiny")
    net = tune_network(model, inputs, target="cuda-sm90", budget="8 trials", work_dir=str(tmp_path / "w"),
                       num_workers=0, progress=False, config=NetworkTuneConfig(round_size=4))
    assert net.check.startswith("built; not run")
    funcs = [gv.name_hint for gv, f in net.built.module.functions_items() if "PrimFunc" in type(f).__name__]
    assert set(funcs) == applied_tasks(net.built.module)
    assert any(c.record is not None for c in net.built.choices)
    with pytest.raises(RuntimeError, match="built for cuda"):
        net.run(*[x.numpy() for x in inputs])


def test_verify_top_k_measures_each_task_and_reports_it(resnet_tiny, tuned, tmp_path, monkeypatch) -> None:
    import shutil

    from drytune.measure import BuildPool
    from drytune.scheduler import tune_network as tn
    from drytune.search import LocalScorer

    _, work = tuned
    again = str(tmp_path / "again")
    shutil.copytree(work, again)
    model, inputs = resnet_tiny
    min_share = 0.05
    made = []
    monkeypatch.setattr(tn, "make_scorer", lambda *a, **kw: made.append(a) or LocalScorer())
    batches = []  # the real build processes, watched: every task's candidates are compiled in one batch
    compile_batch = BuildPool.compile
    monkeypatch.setattr(BuildPool, "compile",
                        lambda pool, jobs: batches.append(jobs) or compile_batch(pool, jobs))
    net = tune_network(model, inputs, budget="96 trials", work_dir=again, num_workers=2, progress=False,
                       verify_top_k=2, config=dataclasses.replace(SMALL, verify_min_share=min_share))
    assert made == []  # the budget was spent: no scorer (no Ray) was started
    assert sum(r.trials for r in read_rounds(again)) == 96  # the budget was spent: nothing more is tuned
    rows = {r.name: r for r in net.report().rows}
    total = net.report().predicted_total
    tuned_names = [c.name for c in net.built.choices if c.record is not None]
    large = [n for n in tuned_names if rows[n].calls * rows[n].predicted >= min_share * total]
    small = [n for n in tuned_names if n not in large]
    assert large and small  # the tiny ResNet has both kinds at 5%
    assert all(rows[n].measured is not None and rows[n].measured > 0 for n in large)
    assert all(rows[n].measured is None for n in small)  # left to the model
    assert len(batches) == 1 and len(batches[0]) >= 2 * len(large)  # then timed task by task, compiling nothing
    assert net.phase_seconds["verify"] > 0
    assert "matches the reference" in net.check


def test_work_dir_of_another_model_is_not_applied(tuned, tmp_path, caplog) -> None:
    import shutil

    _, work = tuned
    other = str(tmp_path / "copy")
    shutil.copytree(work, other)
    model, inputs = zoo.get_model("bert_tiny")
    with caplog.at_level(logging.WARNING):
        net = tune_network(model, inputs, budget="0 trials", work_dir=other, num_workers=0, progress=False)
    assert "was used for model" in caplog.text
    assert all(c.record is None for c in net.built.choices)  # no subgraph of BERT was tuned in that directory
    assert read_rounds(other) == []  # the ResNet's round log was set aside, not resumed
    assert any(name.startswith("rounds.") and name != "rounds.jsonl" for name in os.listdir(other))
    assert "matches the reference" in net.check
