/* Multiply-add chains of different lengths at the same work (benchmarks/fma_chains.py builds and runs this): each
 * iteration does 32 multiply-adds of 8 lanes with a broadcast weight, into accumulators loaded from and stored back
 * to rows of C, as LLVM builds a reduction loop unrolled inside the accumulator loop. The cases split the 32 into
 * 1, 2, 4 or 8 accumulators (chains of 32, 16, 8 or 4); consecutive iterations use other rows, so that only the
 * core's capacity to hold waiting instructions limits how far they overlap. "independent" is 32 multiply-adds into
 * 16 accumulators kept in registers: the pipes' throughput, to read the others in cycles. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
/* the weights start 2 KiB past a 4 KiB boundary, so that their loads never alias the rows' stores modulo 4 KiB */
static float a[8*64+1024] __attribute__((aligned(4096)));
static float c[8*128] __attribute__((aligned(4096)));
#define CHAINS(NAME, CH) \
__attribute__((noinline)) static double NAME(long it, __m256 g0) { \
  __m256 g[16]; for (int k = 0; k < 16; k++) g[k] = _mm256_add_ps(g0, _mm256_set1_ps(k)); \
  double t0 = now(); \
  for (long i = 0; i < it; i++) { \
    float* cr = c + (i & 7) * 128; const float* ar = a + 512 + (i & 7) * 64; \
    _Pragma("GCC unroll 8") for (int r = 0; r < 32 / CH; r++) { \
      __m256 s = _mm256_loadu_ps(cr + r * 16); \
      _Pragma("GCC unroll 32") for (int k = 0; k < CH; k++) \
        s = _mm256_fmadd_ps(g[(r * CH + k) & 15], _mm256_broadcast_ss(ar + (r * CH + k) % 64), s); \
      _mm256_storeu_ps(cr + r * 16, s); } \
  } \
  return (now() - t0) / it; }
CHAINS(chain32, 32)
CHAINS(chain16, 16)
CHAINS(chain8, 8)
CHAINS(chain4, 4)
__attribute__((noinline)) static double independent(long it, __m256 g0) {
  __m256 s[16], x = _mm256_set1_ps(0.999f);
  for (int k = 0; k < 16; k++) s[k] = _mm256_add_ps(g0, _mm256_set1_ps(k));
  double t0 = now();
  for (long i = 0; i < it; i++) {
    _Pragma("GCC unroll 32") for (int k = 0; k < 32; k++) s[k & 15] = _mm256_fmadd_ps(s[k & 15], x, g0);
    __asm__ volatile("" : "+v"(s[0]), "+v"(s[1]));
  }
  double dt = (now() - t0) / it;
  for (int k = 0; k < 16; k++) _mm256_storeu_ps(c + k * 8, s[k]);
  return dt; }
int main(int argc, char** argv) { int rounds = argc > 1 ? atoi(argv[1]) : 5; long it = argc > 2 ? atol(argv[2]) : 2000000;
  for (int i = 0; i < 8*64+1024; i++) a[i] = 1e-6f * (i % 7);
  __m256 g0 = _mm256_set1_ps(1e-6f);
  const char* n[] = {"independent", "chain32", "chain16", "chain8", "chain4"};
  double (*f[])(long, __m256) = {independent, chain32, chain16, chain8, chain4};
  for (int r = 0; r < rounds; r++) for (int j = 0; j < 5; j++) printf("%d %s %.4f\n", r, n[j], f[j](it, g0));
  return 0; }
