"""How far apart this machine's two cores are, run by run, and what that does to a kernel that moves data between them.

Each run is a fresh process: a C ping-pong of one cache line between threads pinned to CPUs 0 and 1 (one-way ns),
then global_avg_pool (1x2048x7x7) built two ways, measured interleaved: the sum of the parallel partial sums read by
a serial loop (half of the partial sums were written by the other core) and the same sum in the mean's parallel
loop (each core reads what it wrote). The hypervisor places the two vCPUs near or far apart, and keeps them there
for minutes: the two kernels' ratio follows the ping-pong.

    python benchmarks/core_to_core.py --runs 6 --out benchmarks/results/core_to_core_znver4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from op_tuning import interleaved  # noqa: E402

PING_PONG_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#define N 200000
static _Atomic int flag __attribute__((aligned(64)));
static void pin(int cpu) {
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
static void *other(void *arg) {
  pin(1);
  for (int i = 0; i < N; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {}
    atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
  }
  return arg;
}
int main(void) {
  pthread_t t; struct timespec a, b;
  pin(0); pthread_create(&t, 0, other, 0);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < N; i++) {
    atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {}
  }
  clock_gettime(CLOCK_MONOTONIC, &b); pthread_join(t, 0);
  printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / N / 2);
  return 0;
}
"""


def ping_pong_binary(tmp: str) -> str:
    src, exe = os.path.join(tmp, "pp.c"), os.path.join(tmp, "pp")
    with open(src, "w") as f:
        f.write(PING_PONG_C)
    subprocess.run(["gcc", "-O2", "-pthread", src, "-o", exe], check=True)
    return exe


def global_avg_pool_programs() -> dict[str, object]:
    """The rfactor-ed pool (partial sums in a parallel loop over channels), its final sum serial or parallel."""
    from tvm import s_tir

    from drytune import workloads

    mod = s_tir.Schedule(workloads.get("global_avg_pool").prim_func()).mod
    out = {}
    for name, parallel_sum in (("serial_sum", False), ("parallel_sum", True)):
        sch = s_tir.Schedule(mod)
        n, c, y, x, rh, rw = sch.get_loops(sch.get_sblock("pool_sum"))
        _, inner = sch.split(sch.fuse(rh, rw), [7, 7])
        rf = sch.rfactor(inner, factor_axis=4)
        rn, rc, ry, rx, _, lane = sch.get_loops(rf)
        sch.parallel(sch.fuse(rn, rc, ry, rx))
        sch.vectorize(lane)
        an, ac, _, _ = sch.get_loops(sch.get_sblock("pool_avg"))
        outer = sch.fuse(an, ac)
        sch.compute_at(sch.get_sblock("pool_sum"), outer)
        if parallel_sum:
            sch.parallel(outer)
        out[name] = sch.mod
    return out


def one_run(exe: str, rounds: int) -> dict:
    """Ping-pong before and after, and the two kernels' median seconds over `rounds` interleaved rounds."""
    from drytune import workloads
    from drytune.verify import check_module

    task = workloads.get("global_avg_pool").task()
    mods = global_avg_pool_programs()
    for name, mod in mods.items():
        if not check_module(task, mod, rtol=1e-4, atol=1e-5).ok:
            raise RuntimeError(f"{name} does not compute the unscheduled program's output")
    before = float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)
    times = interleaved(mods, task.target, rounds=rounds)
    after = float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"ping_pong_ns": [before, after], "median_s": med, "serial_over_parallel": med["serial_sum"] /
            med["parallel_sum"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pause", type=float, default=20.0, help="seconds between runs")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "core_to_core"))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one run in this process, with this binary
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.rounds)))
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = ping_pong_binary(tmp)
        for i in range(args.runs):
            if i:
                time.sleep(args.pause)
            proc = subprocess.run([sys.executable, __file__, "--one", exe, "--rounds", str(args.rounds)],
                                  capture_output=True, text=True, check=True)
            row = json.loads(proc.stdout.strip().splitlines()[-1]) | {"time": time.strftime("%H:%M:%S")}
            runs.append(row)
            print(f"run {i}: ping-pong {row['ping_pong_ns'][0]:.0f} / {row['ping_pong_ns'][1]:.0f} ns one way; "
                  f"serial sum {row['median_s']['serial_sum'] * 1e6:.1f} us, parallel sum "
                  f"{row['median_s']['parallel_sum'] * 1e6:.1f} us ({row['serial_over_parallel']:.2f}x)", flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "runs": runs}
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    print("wrote", args.out + ".json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
