/* Accumulator updates with vectors of whole and widened registers (benchmarks/widened_vectors.py builds and runs
 * this). Each update loads an accumulator, adds four broadcast-times-vector products and stores it back, for 56
 * accumulators a given number of floats apart, as the unrolled body of a 1x1 convolution does. A vector of 10 or
 * 12 lanes is what LLVM emits for such a TVM vector on AVX-512: the pieces are loaded and inserted into one zmm,
 * and extracted and stored piece by piece; 6 lanes do the same in a ymm. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NACC 56
static float *acc, *act, *wgt;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One accumulator update loop on W-bit registers of type T (W = 512 or 256). */
#define BODY(W, T, LOAD, STORE)                                                                  \
    for (int it = 0; it < iters; it++) {                                                         \
        const float* a = act + (it & 63) * 4;                                                    \
        T w0 = _mm##W##_loadu_ps(wgt), w1 = _mm##W##_loadu_ps(wgt + 16);                         \
        T w2 = _mm##W##_loadu_ps(wgt + 32), w3 = _mm##W##_loadu_ps(wgt + 48);                    \
        for (int i = 0; i < NACC; i++) {                                                         \
            float* p = acc + i * stride;                                                         \
            T c = LOAD;                                                                          \
            c = _mm##W##_fmadd_ps(_mm##W##_set1_ps(a[i & 7]), w0, c);                            \
            c = _mm##W##_fmadd_ps(_mm##W##_set1_ps(a[(i & 7) + 1]), w1, c);                      \
            c = _mm##W##_fmadd_ps(_mm##W##_set1_ps(a[(i & 7) + 2]), w2, c);                      \
            c = _mm##W##_fmadd_ps(_mm##W##_set1_ps(a[(i & 7) + 3]), w3, c);                      \
            STORE;                                                                               \
        }                                                                                        \
    }
#define BODY_512(LOAD, STORE) BODY(512, __m512, LOAD, STORE)
#define BODY_256(LOAD, STORE) BODY(256, __m256, LOAD, STORE)

__attribute__((noinline)) static void zmm16(int stride, int iters) {
    BODY_512(_mm512_loadu_ps(p), _mm512_storeu_ps(p, c))
}

__attribute__((noinline)) static void zmm10(int stride, int iters) {
    BODY_512(_mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(p))),
                                                 _mm256_castpd128_pd256(_mm_load_sd((const double*)(p + 8))), 1)),
             (_mm256_storeu_ps(p, _mm512_castps512_ps256(c)),
              _mm_storel_pi((__m64*)(p + 8), _mm512_extractf32x4_ps(c, 2))))
}

__attribute__((noinline)) static void zmm12(int stride, int iters) {
    BODY_512(_mm512_insertf32x4(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm_loadu_ps(p + 8), 2),
             (_mm256_storeu_ps(p, _mm512_castps512_ps256(c)), _mm_storeu_ps(p + 8, _mm512_extractf32x4_ps(c, 2))))
}

__attribute__((noinline)) static void ymm8(int stride, int iters) {
    BODY_256(_mm256_loadu_ps(p), _mm256_storeu_ps(p, c))
}

__attribute__((noinline)) static void ymm6(int stride, int iters) {
    BODY_256(_mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),
                                  _mm_castpd_ps(_mm_load_sd((const double*)(p + 4))), 1),
             (_mm_storeu_ps(p, _mm256_castps256_ps128(c)), _mm_storel_pi((__m64*)(p + 4), _mm256_extractf128_ps(c, 1))))
}

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5, iters = argc > 2 ? atoi(argv[2]) : 200000;
    acc = aligned_alloc(64, 1 << 20);
    act = aligned_alloc(64, 1 << 16);
    wgt = aligned_alloc(64, 1 << 12);
    memset(acc, 0, 1 << 20);
    for (int i = 0; i < (1 << 14); i++) act[i] = 1e-3f;
    for (int i = 0; i < 1024; i++) wgt[i] = 1e-3f;
    struct { const char* name; void (*f)(int, int); int stride; } cases[] = {
        {"zmm16_stride16", zmm16, 16}, {"zmm10_stride10", zmm10, 10}, {"zmm10_stride16", zmm10, 16},
        {"zmm12_stride12", zmm12, 12}, {"zmm12_stride16", zmm12, 16}, {"ymm8_stride8", ymm8, 8},
        {"ymm6_stride6", ymm6, 6}, {"ymm6_stride8", ymm6, 8}};
    for (int r = 0; r < rounds; r++)
        for (unsigned j = 0; j < sizeof(cases) / sizeof(cases[0]); j++) {
            double t0 = now();
            cases[j].f(cases[j].stride, iters);
            printf("%d %s %.4f\n", r, cases[j].name, (now() - t0) / iters / NACC * 1e9);
        }
    return 0;
}
