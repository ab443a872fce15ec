/* Gather instructions beside independent multiply-adds (benchmarks/serial_gathers.py builds and runs this). Each
 * case runs G gathers and F zmm FMAs per iteration; the FMAs feed 6 independent chains and the gathers read 8 or 16
 * floats 64 apart from an L1-resident buffer, so neither waits on the other. If the core overlapped them, a mixed
 * case would take as long as the slower part; on Zen 4 it takes their sum. TVM's own strided vectors are built lane
 * by lane (vmovss, vinsertps) instead: the `ins` cases time those; the `s` cases scatter 8 lanes (vscatterqps). */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static float buf[1 << 16] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 8 lanes with 64-bit indices (vgatherqps ymm, what LLVM emits for TVM's int64 addresses) */
static inline __m256 gather_q8(const float* p, __m512i idx) { return _mm512_i64gather_ps(idx, p, 4); }
/* 16 lanes with 32-bit indices (vgatherdps zmm) */
static inline __m512 gather_d16(const float* p, __m512i idx) { return _mm512_i32gather_ps(idx, p, 4); }
/* 16 lanes loaded one by one and inserted, as TVM's codegen builds a strided vector */
static inline __m512 inserts16(const float* p) {
    __m128 q[4];
    for (int c = 0; c < 4; c++) {
        q[c] = _mm_load_ss(p + (4 * c) * 64);
        q[c] = _mm_insert_ps(q[c], _mm_load_ss(p + (4 * c + 1) * 64), 0x10);
        q[c] = _mm_insert_ps(q[c], _mm_load_ss(p + (4 * c + 2) * 64), 0x20);
        q[c] = _mm_insert_ps(q[c], _mm_load_ss(p + (4 * c + 3) * 64), 0x30);
    }
    return _mm512_insertf32x4(_mm512_insertf32x4(_mm512_insertf32x4(_mm512_castps128_ps512(q[0]), q[1], 1), q[2], 2),
                              q[3], 3);
}

/* 8 lanes scattered with 64-bit indices (vscatterqps ymm), each case's own lines */
static inline void scatter_q8(float* p, __m512i idx, __m256 v) { _mm512_i64scatter_ps(p, idx, v, 4); }

#define CASE(NAME, KIND, G, F)                                                                        \
    __attribute__((noinline)) static double NAME(long iters) {                                        \
        __m512i iq = _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64(64)); \
        __m512i id = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), \
                                        _mm512_set1_epi32(64));                                      \
        __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1.f), a2 = _mm512_set1_ps(2.f);        \
        __m512 a3 = _mm512_set1_ps(3.f), a4 = _mm512_set1_ps(4.f), a5 = _mm512_set1_ps(5.f);          \
        __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f), g = _mm512_setzero_ps();       \
        double t = now();                                                                             \
        for (long i = 0; i < iters; i++) {                                                           \
            const float* p = buf + (i & 63);                                                          \
            for (int q = 0; q < G; q++) {                                                             \
                if (KIND == 0) g = _mm512_add_ps(g, _mm512_castps256_ps512(gather_q8(p + q, iq)));    \
                else if (KIND == 1) g = _mm512_add_ps(g, gather_d16(p + q, id));                      \
                else if (KIND == 2) g = _mm512_add_ps(g, inserts16(p + q));                           \
                else scatter_q8(buf + 8192 + q * 4096 + (i & 63), iq, _mm512_castps512_ps256(c));       \
            }                                                                                         \
            for (int f = 0; f < F; f += 6) {                                                          \
                a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c); a2 = _mm512_fmadd_ps(a2, m, c); \
                a3 = _mm512_fmadd_ps(a3, m, c); a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c); \
            }                                                                                         \
        }                                                                                             \
        t = now() - t;                                                                                \
        __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(g, a0), _mm512_add_ps(a1, a2)),           \
                                 _mm512_add_ps(_mm512_add_ps(a3, a4), a5));                             \
        volatile float v = _mm512_reduce_add_ps(s);                                                   \
        (void)v;                                                                                      \
        return t / iters;                                                                             \
    }

CASE(fma24, 0, 0, 24)
CASE(fma48, 0, 0, 48)
CASE(q8x1, 0, 1, 0)
CASE(q8x2, 0, 2, 0)
CASE(q8x1_fma24, 0, 1, 24)
CASE(q8x2_fma48, 0, 2, 48)
CASE(d16x1, 1, 1, 0)
CASE(d16x1_fma24, 1, 1, 24)
CASE(ins16x1, 2, 1, 0)
CASE(ins16x1_fma24, 2, 1, 24)
CASE(s8x1, 3, 1, 0)
CASE(s8x1_fma24, 3, 1, 24)

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    long iters = argc > 2 ? atol(argv[2]) : 1000000;
    for (int i = 0; i < (1 << 16); i++) buf[i] = i * 1e-6f;
    struct { const char* name; double (*fn)(long); } cases[] = {
        {"fma24", fma24}, {"fma48", fma48}, {"q8x1", q8x1}, {"q8x2", q8x2}, {"q8x1_fma24", q8x1_fma24},
        {"q8x2_fma48", q8x2_fma48}, {"d16x1", d16x1}, {"d16x1_fma24", d16x1_fma24}, {"ins16x1", ins16x1},
        {"ins16x1_fma24", ins16x1_fma24}, {"s8x1", s8x1}, {"s8x1_fma24", s8x1_fma24}};
    for (int r = 0; r < rounds; r++)
        for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++)
            printf("%d %s %.4f\n", r, cases[k].name, cases[k].fn(iters) * 1e9);
    return 0;
}
