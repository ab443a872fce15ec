"""How close to the FMA peak a register-tiled GEMM inner loop gets on this machine: the ceiling of the issue's GEMM
goal (70% of the measured peak), measured, not assumed.

A hand-written C micro-kernel (`MR` rows x `NV` vectors of C held in registers, A's element broadcast from memory,
B's vectors loaded, both packed and resident in L1, as in BLIS) is compiled with gcc for this CPU's widest vectors
and run on every core; the FMA peak (`op_tuning.FMA_PEAK_C`, a loop with no memory operand) and, optionally,
GEMM candidates of the suite (`--variants`, the `task_variants.py --op gemm` format) are timed in the same
interleaved rounds. Each row is the median over rounds of its GFLOP/s over the peak of the same round.
`tile_peak.py` asks the same of the tiles TVM builds (one thread, 16 lanes); this one asks it of gcc's code, on every
core, with AVX2's 8 lanes where the CPU has no AVX-512.

    python benchmarks/gemm_ceiling.py --shapes 6x2,4x3,3x4,2x6 --rounds 7 --variants FILE --tag znver3_s79
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from op_tuning import build_c, fma_peak_gflops, interleaved, run_gflops
from report_files import write_report
from task_variants import operator_variants

from drytune.verify import check_candidate

GEMM_FLOPS = 2.0 * 1024**3  # every timing is reported as seconds for this many FLOPs at its rate

MICROKERNEL_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define LOAD _mm512_loadu_ps
#define STORE _mm512_storeu_ps
#define BCAST(p) _mm512_set1_ps(*(p))
#define FMADD _mm512_fmadd_ps
#else
typedef __m256 vec;
#define LANES 8
#define LOAD _mm256_loadu_ps
#define STORE _mm256_storeu_ps
#define BCAST(p) _mm256_broadcast_ss(p)
#define FMADD _mm256_fmadd_ps
#endif
#define KC 128
#define PANELS 4
static void kernel(const float *a, const float *b, float *c) {
  vec acc[MR * NV];
  _Pragma("GCC unroll 32") for (int i = 0; i < MR * NV; ++i) acc[i] = LOAD(c + i * LANES);
  for (int k = 0; k < KC; ++k) {
    vec bv[NV];
    _Pragma("GCC unroll 32") for (int j = 0; j < NV; ++j) bv[j] = LOAD(b + (k * NV + j) * LANES);
    _Pragma("GCC unroll 32") for (int i = 0; i < MR; ++i) {
      vec av = BCAST(a + k * MR + i);
      _Pragma("GCC unroll 32") for (int j = 0; j < NV; ++j) acc[i * NV + j] = FMADD(av, bv[j], acc[i * NV + j]);
    }
  }
  _Pragma("GCC unroll 32") for (int i = 0; i < MR * NV; ++i) STORE(c + i * LANES, acc[i]);
}
int main(void) {
  const long calls = 400000000L / (MR * NV * KC); double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = omp_get_wtime(); float sink = 0;
    #pragma omp parallel reduction(+:sink)
    {
      float *a = aligned_alloc(64, sizeof(float) * KC * MR * PANELS);
      float *b = aligned_alloc(64, sizeof(float) * KC * NV * LANES);
      float *c = aligned_alloc(64, sizeof(float) * MR * NV * LANES * PANELS);
      for (int i = 0; i < KC * MR * PANELS; ++i) a[i] = 1e-3f;
      for (int i = 0; i < KC * NV * LANES; ++i) b[i] = 1e-3f;
      for (int i = 0; i < MR * NV * LANES * PANELS; ++i) c[i] = 0.f;
      for (long n = 0; n < calls; ++n)
        kernel(a + (n % PANELS) * KC * MR, b, c + (n % PANELS) * MR * NV * LANES);
      sink += c[1];
      free(a); free(b); free(c);
    }
    double flops = 2.0 * MR * NV * LANES * KC * (double)calls * omp_get_max_threads();
    double rate = flops / (omp_get_wtime() - t0);
    if (rate > best) best = rate;
    if (sink == 12345.f) printf("!");
  }
  printf("%f\n", best / 1e9);
  return 0;
}
"""


def build_microkernel(workdir: str, rows: int, vectors: int) -> str:
    """The micro-kernel with an `rows` x `vectors` register tile, built for this CPU; returns the executable."""
    return build_c(MICROKERNEL_C, os.path.join(workdir, f"microkernel_{rows}x{vectors}"),
                   (f"-DMR={rows}", f"-DNV={vectors}"))


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'6x2,3x4' -> [(6, 2), (3, 4)]: rows x vectors of the register tile."""
    shapes = []
    for item in filter(None, text.split(",")):
        rows, _, vectors = item.partition("x")
        if not (rows.isdigit() and vectors.isdigit()) or int(rows) * int(vectors) == 0:
            raise SystemExit(f"bad shape {item!r}: write ROWSxVECTORS, e.g. 6x2")
        shapes.append((int(rows), int(vectors)))
    return shapes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="6x2,4x3,3x4,2x6", help="register tiles, rows x vectors, comma-separated")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--variants", default=None,
                    help="GEMM candidates to time in the same rounds (a task_variants.py --op gemm variants file)")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes)
    mods, target = {}, None
    if args.variants:
        with open(args.variants) as f:
            task, target, cands, _ = operator_variants("gemm", json.load(f))
        for label, cand in cands.items():
            check_candidate(task, cand)
            mods[label] = cand.to_mod()
    with tempfile.TemporaryDirectory() as d:
        exes = {f"micro-kernel {r} x {v}": build_microkernel(d, r, v) for r, v in shapes}
        # the peak is built anew in each round, as op_tuning measures it: run right after TVM's kernels, a prebuilt
        # peak loop measured half the rate (likely TVM's runtime threads still spinning on the other core)
        extra = {"FMA peak": lambda: GEMM_FLOPS / (fma_peak_gflops(args.threads) * 1e9)}
        extra.update({name: (lambda exe=exe: GEMM_FLOPS / (run_gflops(exe, args.threads) * 1e9))
                      for name, exe in exes.items()})
        times = interleaved(mods, target, rounds=args.rounds, extra=extra)
    peaks = times["FMA peak"]
    rows = []
    for name, secs in times.items():
        fractions = [p / s for p, s in zip(peaks, secs, strict=True)]
        rows.append({"kernel": name, "gflops_median": GEMM_FLOPS / statistics.median(secs) / 1e9,
                     "fraction_of_peak": statistics.median(fractions), "rounds_s": secs})
    report = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "rows": rows,
              "command": "python benchmarks/gemm_ceiling.py " + " ".join(sys.argv[1:])}
    lines = ["# A GEMM register tile's ceiling on this machine", "",
             f"{report['date']}, {args.threads} threads. `{report['command']}`", "",
             f"Median over {args.rounds} interleaved rounds of each kernel's GFLOP/s over the FMA peak of the same "
             "round. The micro-kernels keep A and B packed in L1, so a GEMM built on the same register tile can "
             "hardly run faster.", "",
             "| kernel | GFLOP/s (median) | fraction of the peak |", "|---|---|---|"]
    lines += [f"| {r['kernel']} | {r['gflops_median']:.1f} | {r['fraction_of_peak']:.3f} |" for r in rows]
    write_report("gemm_ceiling", args.tag, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
