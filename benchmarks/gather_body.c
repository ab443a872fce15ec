/* One body of a strided convolution as LLVM built it for Emerald Rapids (benchmarks/gather_body.py builds and runs
 * this): per iteration 4 reduction steps, each loading a row of 14 stride-2 inputs (8 lanes + a masked 6) and
 * broadcasting 8 weights into 16 multiply-adds, over 8 output channels x 14 columns of accumulators. The cases
 * either gather the stride-2 inputs (vgatherdps, as LLVM's SLP vectorizer did) or load them contiguously, and either
 * keep the 6 tail lanes of each channel's accumulators in registers or, as LLVM did, load them under the mask at the
 * start of each iteration and store them back under the mask at its end. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static float in[4096] __attribute__((aligned(64)));
static float w[8*64] __attribute__((aligned(64)));
static float acc[8*32] __attribute__((aligned(64)));
/* GATHER: 1 gathers the stride-2 input, 0 loads it contiguously; MEM: 1 keeps the tail accumulators in memory
   under a mask, 0 in registers */
#define BODY(NAME, GATHER, MEM) \
__attribute__((noinline)) static double NAME(long it) { \
  __m256i idx = _mm256_setr_epi32(0,2,4,6,8,10,12,14); __mmask8 k = 0x3f; \
  __m256 h[8], t[8]; _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) { h[c] = _mm256_setzero_ps(); t[c] = _mm256_setzero_ps(); } \
  double t0 = now(); \
  for (long i = 0; i < it; i++) { \
    const float* p = in + (i & 7) * 4; const float* q = w + (i & 7); \
    if (MEM) _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) t[c] = _mm256_maskz_loadu_ps(k, acc + c * 32 + 8); \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) { \
      __m256 x0, x1; \
      if (GATHER) { x0 = _mm256_i32gather_ps(p + r * 64, idx, 4); x1 = _mm256_mmask_i32gather_ps(_mm256_setzero_ps(), k, idx, p + r * 64 + 16, 4); } \
      else { x0 = _mm256_loadu_ps(p + r * 64); x1 = _mm256_maskz_loadu_ps(k, p + r * 64 + 16); } \
      _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) { __m256 b = _mm256_broadcast_ss(q + c * 64 + r); \
        h[c] = _mm256_fmadd_ps(b, x0, h[c]); t[c] = _mm256_fmadd_ps(b, x1, t[c]); } \
    } \
    if (MEM) { _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) _mm256_mask_storeu_ps(acc + c * 32 + 8, k, t[c]); } \
    __asm__ volatile("" ::: "memory"); \
  } \
  double dt = now() - t0; \
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) { _mm256_storeu_ps(acc + c * 32, h[c]); if (!MEM) _mm256_mask_storeu_ps(acc + c * 32 + 8, k, t[c]); } \
  return dt / it; }
BODY(gather_mem, 1, 1)
BODY(gather_regs, 1, 0)
BODY(loads_mem, 0, 1)
BODY(loads_regs, 0, 0)
int main(int argc, char** argv) { int rounds = argc > 1 ? atoi(argv[1]) : 5; long it = argc > 2 ? atol(argv[2]) : 2000000;
  for (int i = 0; i < 4096; i++) in[i] = 1e-3f * (i % 7); for (int i = 0; i < 512; i++) w[i] = 1e-3f * (i % 5);
  const char* n[] = {"gather_mem", "gather_regs", "loads_mem", "loads_regs"}; double (*f[])(long) = {gather_mem, gather_regs, loads_mem, loads_regs};
  for (int r = 0; r < rounds; r++) for (int j = 0; j < 4; j++) printf("%d %s %.4f\n", r, n[j], f[j](it));
  return 0; }
