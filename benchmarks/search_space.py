"""Search-space benchmark: per suite operator and target, sketches, space size, validity and speed.

For each operator: the number of sketches, an estimate of the space size, how many of N random candidates
TVM accepts and builds (CPU: to a module; CUDA: to CUDA C, and a sample of them to PTX with nvcc), every
failure counted with its reason, candidates sampled and lowered per second, and whether each of
MetaSchedule's design spaces (`generate_design_space`) has a sketch of ours with the same structure.

    python benchmarks/search_space.py --targets llvm,cuda-sm90 --samples 200 --ptx-samples 20

Results go to benchmarks/results/search_space.json and search_space.md.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import platform
import tempfile
import time

import tvm

import drytune as dt
from drytune import workloads
from drytune.annotate.candidate import _first_line
from drytune.errors import InvalidCandidateError
from drytune.sketch.steps import Inline, MultiLevelTile, RFactor

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def reason(err: BaseException) -> str:
    text = err.reason if isinstance(err, InvalidCandidateError) else _first_line(err)
    return " ".join(text.split())[:140]


def our_signatures(space: dt.SearchSpace) -> list[tuple[frozenset, frozenset, bool]]:
    out = []
    for sk in space.sketches:
        tiled = frozenset(s.block for s in sk.steps if isinstance(s, MultiLevelTile))
        inlined = frozenset(s.block for s in sk.steps if isinstance(s, Inline))
        inlined |= frozenset(s.consumer for s in sk.steps if isinstance(s, MultiLevelTile) and s.gpu and s.consumer)
        out.append((tiled, inlined, any(isinstance(s, RFactor) for s in sk.steps)))
    return out


def ms_signatures(task: dt.Task) -> list[tuple[frozenset, frozenset, bool]]:
    """Structure of each MetaSchedule design space: tiled blocks, inlined blocks, rfactor used."""
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=task.mod, target=task.target, space_generator="post-order-apply",
                         search_strategy="evolutionary", num_threads=1)
    out = []
    for sch in ctx.generate_design_space():
        names: list[tuple[object, str]] = []

        def name_of(rv: object, names: list[tuple[object, str]] = names) -> str:
            return next((n for r, n in names if r.same_as(rv)), "?")

        tiled, inlined, rfactor = set(), set(), False
        for inst in sch.trace.insts:
            kind = inst.kind.name
            if kind == "GetSBlock":
                names.append((inst.outputs[0], str(inst.attrs[0])))
            elif kind == "Annotate" and str(inst.attrs[0]) == "meta_schedule.tiling_structure":
                tiled.add(name_of(inst.inputs[0]))
            elif kind in ("ComputeInline", "ReverseComputeInline"):
                inlined.add(name_of(inst.inputs[0]))
            elif kind == "RFactor":
                rfactor = True
        out.append((frozenset(tiled), frozenset(inlined), rfactor))
    return out


def covered(ms_sig: tuple, ours: list[tuple]) -> bool:
    tiled, inlined, rfactor = ms_sig
    return any(t == tiled and inlined <= i and (r == rfactor or not rfactor) for t, i, r in ours)


def ptx_check(sources: list[str], arch: str) -> list[str | None]:
    """nvcc -ptx each CUDA source (two at a time); None = built, else the first error line."""
    import subprocess

    def one(src: str) -> str | None:
        with tempfile.TemporaryDirectory() as d:
            cu = os.path.join(d, "k.cu")
            with open(cu, "w") as f:
                f.write(src)
            proc = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", cu, "-o", os.path.join(d, "k.ptx")],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode == 0:
                return None
            errs = [ln for ln in proc.stderr.splitlines() if "error" in ln]
            return ("nvcc: " + (errs[0] if errs else proc.stderr.strip()[:200]))[:160]

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(one, sources))


def bench_op(name: str, target: str, samples: int, ptx_samples: int, with_ms: bool) -> dict:
    task = workloads.get(name).task(target)
    t0 = time.perf_counter()
    space = dt.SearchSpace(task)
    derive_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cands = space.sample(samples, seed=2026)
    sample_s = time.perf_counter() - t0
    failures: collections.Counter[str] = collections.Counter()
    sources: list[str] = []
    lowered = 0
    t0 = time.perf_counter()
    for cand in cands:
        try:
            built = tvm.compile(cand.to_mod(), target=task.target)
            lowered += 1
            if task.is_gpu and len(sources) < ptx_samples:
                sources.append(built.mod.imports[0].inspect_source("cuda"))
        except Exception as err:  # noqa: BLE001 - every failure is counted with its reason
            failures[reason(err)] += 1
    build_s = time.perf_counter() - t0
    ptx_fail = 0
    if sources:
        arch = str(task.target.attrs["arch"])
        for err in ptx_check(sources, arch):
            if err is not None:
                ptx_fail += 1
                failures[err] += 1
    row = {
        "op": name, "target": target, "flops": task.flops, "sketches": len(space.sketches),
        "rules": sorted({r.split("(")[0] for s in space.sketches for r in s.rules}),
        "space_size": space.size(), "samples": samples, "built": lowered,
        "valid_rate": lowered / samples, "ptx_built": len(sources) - ptx_fail, "ptx_tried": len(sources),
        "failures": dict(failures), "derive_s": derive_s,
        "sampled_per_s": samples / sample_s if sample_s else float("inf"),
        "built_per_s": samples / build_s,
    }
    if with_ms:
        try:
            ms_sigs = ms_signatures(task)
            ours = our_signatures(space)
            row["ms_design_spaces"] = len(ms_sigs)
            row["ms_covered"] = sum(covered(s, ours) for s in ms_sigs)
        except Exception as err:  # noqa: BLE001 - reported, not fatal
            row["ms_error"] = reason(err)
    return row


def write_markdown(rows: list[dict], path: str, meta: dict) -> None:
    lines = [f"Search space, {meta['date']}, {meta['machine']}; {meta['samples']} random candidates per operator.",
             "", "| target | op | sketches | space size | valid (built) | PTX built | sampled/s | built/s |"
             " MS design spaces covered |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ptx = f"{r['ptx_built']}/{r['ptx_tried']}" if r["ptx_tried"] else "-"
        ms = f"{r.get('ms_covered', '-')}/{r.get('ms_design_spaces', '-')}" if "ms_error" not in r else "error"
        lines.append(f"| {r['target']} | {r['op']} | {r['sketches']} | {r['space_size']:.2e} | "
                     f"{100 * r['valid_rate']:.1f}% | {ptx} | {r['sampled_per_s']:.0f} | "
                     f"{r['built_per_s']:.1f} | {ms} |")
    fails = [(r["target"], r["op"], k, v) for r in rows for k, v in r["failures"].items()]
    if fails:
        lines += ["", "Failures by reason:", ""] + [f"- {t} {o}: {v} x {k}" for t, o, k, v in fails]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def update_ms_coverage(out: str) -> None:
    with open(out + ".json") as f:
        data = json.load(f)
    for row in data["rows"]:
        task = workloads.get(row["op"]).task(row["target"])
        row.pop("ms_error", None)
        try:
            ms_sigs = ms_signatures(task)
            ours = our_signatures(dt.SearchSpace(task))
            row["ms_design_spaces"], row["ms_covered"] = len(ms_sigs), sum(covered(s, ours) for s in ms_sigs)
        except Exception as err:  # noqa: BLE001 - reported, not fatal
            row["ms_error"] = reason(err)
        print(row["target"], row["op"], row.get("ms_covered"), "/", row.get("ms_design_spaces"),
              row.get("ms_error", ""), flush=True)
    with open(out + ".json", "w") as f:
        json.dump(data, f, indent=1)
    write_markdown(data["rows"], out + ".md", data["meta"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="llvm,cuda-sm90")
    ap.add_argument("--ops", default=",".join(workloads.SUITE))
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--ptx-samples", type=int, default=20, help="CUDA candidates per operator built to PTX")
    ap.add_argument("--no-ms", action="store_true", help="skip the MetaSchedule design-space comparison")
    ap.add_argument("--out", default=os.path.join(RESULTS, "search_space"))
    ap.add_argument("--ms-only", action="store_true",
                    help="only (re)compute MetaSchedule coverage into an existing results file")
    args = ap.parse_args()
    if args.ms_only:
        update_ms_coverage(args.out)
        return
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {os.cpu_count()} cpus",
            "samples": args.samples, "tvm": tvm.__version__}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    rows = []
    for target in args.targets.split(","):
        for name in args.ops.split(","):
            row = bench_op(name, target, args.samples, args.ptx_samples, not args.no_ms)
            rows.append(row)
            with open(args.out + ".json", "w") as f:  # rewritten after each operator: a killed run keeps its rows
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
            write_markdown(rows, args.out + ".md", meta)
            print(f"{target:10s} {name:20s} sketches={row['sketches']} valid={100 * row['valid_rate']:5.1f}% "
                  f"ptx={row['ptx_built']}/{row['ptx_tried']} sampled/s={row['sampled_per_s']:.0f} "
                  f"built/s={row['built_per_s']:.1f} "
                  f"ms={row.get('ms_covered', '-')}/{row.get('ms_design_spaces', '-')}"
                  f" {dict(row['failures']) or ''}", flush=True)


if __name__ == "__main__":
    main()
