"""What packing a convolution's weight into panels of output channels buys, hot and cold, on given kernels.

Each network task that convolves with a constant 4-D weight (HWIO: [ry, rx, rc, f]) takes its kernel from a
`networks.py` work directory: drytune's best prediction and MetaSchedule's best measured schedule. Each is timed as
it is and with its weight read from panels, packed[f // P, ry, rx, rc, f % P] (the schedule left alone otherwise;
the panels are what `PackOperand` makes of a constant weight and `prepack` folds at build time), hot and cold
(`cache_flush_cpu_non_first_arg`, as a network's weights come in), interleaved over `--rounds`. A panel width that
does not match the kernel's vector tile makes strided loads (shown, not hidden): the summary takes each kernel's best
width, which is what a search over the width would find, and also the 16-lane one.

    python benchmarks/conv_weight_panels.py --model resnet50 --work-dir drytune-work/networks_rocketlake_s59r_b150 \\
        --tag rocketlake_s60
"""

from __future__ import annotations

import math
import os
import statistics

import tvm
import tvm_ffi
from in_network import isolated_times
from network_tasks import distinct_records, marked_and_plain_tasks, ms_best, open_work_dir, work_dir_parser
from report_files import write_report
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from drytune.measure import MeasureWorker
from drytune.prepack import is_constant_weight
from drytune.records import RecordStore


def conv_weight(mod: tvm.IRModule, constants: list[int]) -> tuple[str, str] | None:
    """The block that reduces over the largest 4-D constant parameter (a convolution's HWIO weight; `constants`: the
    task's constant parameter positions) and that parameter's name; None if the kernel has no such read."""
    params = list(mod["main"].params)
    weights = [params[i] for i in constants if i < len(params) and len(params[i].shape) == 4]
    if not weights:
        return None
    weight = max(weights, key=lambda p: math.prod(int(d) for d in p.shape)).name
    blocks: list[s_tir.SBlock] = []
    tvm_ffi.structural_walk(mod["main"].body, [(s_tir.SBlock, blocks.append)], order="pre")
    for block in blocks:
        if any(iv.iter_type == tvm.tirx.IterVar.CommReduce for iv in block.iter_vars) and any(
                region.source.name == weight for region in block.reads):
            return block.name_hint, weight
    return None


def in_panels(mod: tvm.IRModule, block: str, weight: str, width: int) -> tvm.IRModule:
    """`mod` reading its weight from panels of `width` output channels (the function's parameter changes layout)."""
    sch = s_tir.Schedule(mod)
    sch.transform_layout(sch.get_sblock(block), weight,
                         lambda ry, rx, rc, f: (f // width, ry, rx, rc, f % width))
    return sch.mod


def main() -> int:
    ap = work_dir_parser(__doc__, rounds=3)
    ap.add_argument("--widths", default="16,32,64", help="panel widths tried (output channels)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    target, mdir = open_work_dir(args.work_dir, args.model, args.threads)
    tasks, plain = marked_and_plain_tasks(args.model, args.threads, target)
    store = RecordStore(os.path.join(mdir, "drytune"))
    db = ms.database.JSONDatabase(work_dir=os.path.join(mdir, "ms_long_db"), allow_missing=False)
    rows = []
    with MeasureWorker() as worker:
        for nt, pt in zip(tasks, plain, strict=True):
            constants = [i for i, p in enumerate(nt.task.func.params) if is_constant_weight(nt.task.func, p)]
            records = distinct_records(store, nt.task)
            kernels = {"drytune": records[0].to_schedule().mod if records else None,
                       "MetaSchedule": ms_best(db, pt.task, target)}
            for who, mod in kernels.items():
                found = conv_weight(mod, constants) if mod is not None else None
                if found is None:
                    continue
                channels = int(next(p for p in mod["main"].params if p.name == found[1]).shape[3])
                variants = {"as is": mod}
                for w in widths:
                    if channels % w == 0 and w < channels:
                        variants[f"P{w}"] = in_panels(mod, *found, w)
                hot, cold = isolated_times(list(variants.values()), target, worker, args.rounds)
                row = {"task": nt.name, "calls": nt.weight, "kernel": who,
                       "hot": dict(zip(variants, hot, strict=True)), "cold": dict(zip(variants, cold, strict=True))}
                rows.append(row)
                print(nt.name, who, {k: f"{h * 1e3:.3f}/{c * 1e3:.3f}" for k, h, c in zip(variants, hot, cold,
                                                                                      strict=True)}, flush=True)
    return report(args, rows, widths)


def _best_panels(times: dict[str, float]) -> float:
    return min(t for k, t in times.items() if k != "as is")


def report(args, rows: list[dict], widths: list[int]) -> int:
    cmd = (f"python benchmarks/conv_weight_panels.py --model {args.model} --work-dir {args.work_dir} "
           f"--rounds {args.rounds}" + (f" --tag {args.tag}" if args.tag else ""))
    lines = [f"# {args.model}: convolution weights in panels of output channels", "", f"`{cmd}`", "",
             "Each kernel as it is and with its HWIO weight read as packed[f // P, ry, rx, rc, f % P], the schedule "
             "otherwise unchanged; median ms of the rounds, hot and cold (every argument but the activation flushed "
             "before each run). Best P: the fastest width for that kernel.", ""]
    for who in ("drytune", "MetaSchedule"):
        mine = [r for r in rows if r["kernel"] == who and len(r["cold"]) > 1]
        if not mine:
            continue
        for mode in ("hot", "cold"):
            plain = sum(r["calls"] * r[mode]["as is"] for r in mine)
            best = sum(r["calls"] * _best_panels(r[mode]) for r in mine)
            p16 = [r[mode]["P16"] / r[mode]["as is"] for r in mine if "P16" in r[mode]]
            lines.append(f"- {who}, {mode}: calls x time of {len(mine)} convolutions {plain * 1e3:.2f} ms as is, "
                         f"{best * 1e3:.2f} ms with the best P ({best / plain:.3f}); median per-kernel ratio best P / "
                         f"as is {statistics.median(_best_panels(r[mode]) / r[mode]['as is'] for r in mine):.3f}"
                         + (f", P16 / as is {statistics.median(p16):.3f}" if p16 else ""))
    lines += ["", "| task | calls | kernel | hot ms: as is / " + " / ".join(f"P{w}" for w in widths)
              + " | cold ms: as is / " + " / ".join(f"P{w}" for w in widths) + " |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [" / ".join(f"{r[m][k] * 1e3:.3f}" if k in r[m] else "-" for k in ["as is", *[f"P{w}" for w in widths]])
                 for m in ("hot", "cold")]
        lines.append(f"| {r['task']} | {r['calls']} | {r['kernel']} | {cells[0]} | {cells[1]} |")
    write_report(f"conv_weight_panels_{args.model}", args.tag, {"command": cmd, "rows": rows}, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
