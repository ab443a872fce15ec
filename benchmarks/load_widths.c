/* Loads per cycle by width (benchmarks/load_widths.py builds and runs this). Each case loads two operands per
 * multiply-add from L1-resident buffers into 12 independent accumulators, so the loads, not the FMAs or their
 * latency, bound it: scalar (vmovss / vfmadd231ss), xmm, ymm and zmm vectors, and a scalar broadcast to a zmm as GEMM
 * tiles load their second operand. The `reg` cases run the same FMAs on registers alone: the FMA rate of each width,
 * which gives the cycle. */
/* scalar cases must stay scalar, and each case as written */
#pragma GCC optimize("no-tree-vectorize", "no-tree-slp-vectorize")
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SPAN 1024 /* floats per buffer: 4 KiB each, both well inside L1 */
static float xs[SPAN + 64] __attribute__((aligned(64)));
static float ys[SPAN + 64] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* T: register type; LD(p): load of one operand at p; FMA(a, b, c); ZERO; STEP: floats between operands (a vector's
 * width, so every load is of another line part); SUM(v): reduce an accumulator to one float */
#define EACH(X, ...)                                                                                        \
    X(0, __VA_ARGS__) X(1, __VA_ARGS__) X(2, __VA_ARGS__) X(3, __VA_ARGS__) X(4, __VA_ARGS__) X(5, __VA_ARGS__) \
    X(6, __VA_ARGS__) X(7, __VA_ARGS__) X(8, __VA_ARGS__) X(9, __VA_ARGS__) X(10, __VA_ARGS__) X(11, __VA_ARGS__)
#define DECL(k, T, LDX, STEP) T a##k = LDX(xs + (k + 1) * STEP);
#define STEP_MEM(k, FMA, LDX, LDY, STEP) a##k = FMA(LDX(px + k * STEP), LDY(py + k * STEP), a##k);
#define STEP_REG(k, FMA, LDX, LDY, STEP) a##k = FMA(x0, y0, a##k);
#define ADD(k, SUM) s += SUM(a##k);
/* T: register type; LDX / LDY: load of one operand; FMA(a, b, c); ZERO; STEP: floats between operands (the vector's
 * width); SUM(v): one float of an accumulator; BODY: STEP_MEM (operands loaded) or STEP_REG (registers alone) */
#define CASE(NAME, T, LDX, LDY, FMA, ZERO, STEP, SUM, BODY)                                          \
    __attribute__((noinline)) static double NAME(long iters) {                                     \
        T x0 = LDX(xs), y0 = LDY(ys);                                                              \
        EACH(DECL, T, LDX, STEP)                                                                           \
        double t = now();                                                                          \
        for (long i = 0; i < iters; i++) {                                                         \
            const float* px = xs + ((i * 12 * STEP) & (SPAN - 1));                                 \
            const float* py = ys + ((i * 12 * STEP) & (SPAN - 1));                                 \
            (void)px, (void)py;                                                                    \
            EACH(BODY, FMA, LDX, LDY, STEP)                                                                       \
        }                                                                                          \
        t = now() - t;                                                                             \
        float s = 0.f;                                                                             \
        EACH(ADD, SUM)                                                                            \
        volatile float v = s;                                                                      \
        (void)v;                                                                                   \
        return t / iters;                                                                          \
    }

static inline float ss_load(const float* p) { return *p; }
static inline float ss_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline float ss_sum(float a) { return a; }
static inline __m128 x_load(const float* p) { return _mm_load_ps(p); }
static inline float x_sum(__m128 a) { return _mm_cvtss_f32(a); }
static inline __m256 y_load(const float* p) { return _mm256_load_ps(p); }
static inline float y_sum(__m256 a) { return _mm256_cvtss_f32(a); }
static inline __m512 z_load(const float* p) { return _mm512_load_ps(p); }
static inline __m512 z_bcast(const float* p) { return _mm512_set1_ps(*p); }
static inline float z_sum(__m512 a) { return _mm512_reduce_add_ps(a); }

CASE(ss_mem, float, ss_load, ss_load, ss_fma, 0.f, 1, ss_sum, STEP_MEM)
CASE(ss_reg, float, ss_load, ss_load, ss_fma, 0.f, 1, ss_sum, STEP_REG)
CASE(xmm_mem, __m128, x_load, x_load, _mm_fmadd_ps, _mm_setzero_ps(), 4, x_sum, STEP_MEM)
CASE(xmm_reg, __m128, x_load, x_load, _mm_fmadd_ps, _mm_setzero_ps(), 4, x_sum, STEP_REG)
CASE(ymm_mem, __m256, y_load, y_load, _mm256_fmadd_ps, _mm256_setzero_ps(), 8, y_sum, STEP_MEM)
CASE(ymm_reg, __m256, y_load, y_load, _mm256_fmadd_ps, _mm256_setzero_ps(), 8, y_sum, STEP_REG)
CASE(zmm_mem, __m512, z_load, z_load, _mm512_fmadd_ps, _mm512_setzero_ps(), 16, z_sum, STEP_MEM)
CASE(zmm_reg, __m512, z_load, z_load, _mm512_fmadd_ps, _mm512_setzero_ps(), 16, z_sum, STEP_REG)
CASE(zmm_bcast_mem, __m512, z_load, z_bcast, _mm512_fmadd_ps, _mm512_setzero_ps(), 16, z_sum, STEP_MEM)

typedef double (*case_fn)(long);
static const struct {
    const char* name;
    case_fn fn;
} cases[] = {{"ss_mem", ss_mem},   {"ss_reg", ss_reg},   {"xmm_mem", xmm_mem}, {"xmm_reg", xmm_reg},
             {"ymm_mem", ymm_mem}, {"ymm_reg", ymm_reg}, {"zmm_mem", zmm_mem}, {"zmm_reg", zmm_reg},
             {"zmm_bcast_mem", zmm_bcast_mem}};

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    long iters = argc > 2 ? atol(argv[2]) : 1000000;
    for (int i = 0; i < SPAN + 64; i++) xs[i] = ys[i] = 1e-3f * (i % 17);
    for (int r = 0; r < rounds; r++)
        for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; c++)
            printf("%d %s %.4f\n", r, cases[c].name, cases[c].fn(iters) * 1e9);
    return 0;
}
