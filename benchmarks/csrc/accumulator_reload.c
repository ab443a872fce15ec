/* One GEMM register-tile body per row block: 4 x 64 floats of accumulators (16 zmm), STEPS reduction steps of 16 FMAs
 * (4 broadcasts of A, 4 vectors of B), over 32 row blocks. Variants differ only in where the accumulators live:
 * in registers across the row blocks (no memory traffic for them), or loaded and stored by every body from a buffer
 * whose blocks are 1 KiB apart (the layout of a TVM cache-write buffer) or 4 KiB apart at chosen offsets modulo 4 KiB
 * from the B slice that the next body loads (a probe for 4K aliasing of stores and later loads).
 * Prints "round variant seconds" lines; accumulator_reload.py runs it and writes the table. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef STEPS
#define STEPS 16
#endif
#define BLOCKS 32

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* BODY(c, a): STEPS reduction steps of the 4 x 64 tile on the accumulators acc[][] */
#define BODY(a)                                                                                            \
    do {                                                                                                    \
        const float *b = B;                                                                                 \
        __asm__ volatile("" : "+r"(b)); /* the same B for every block: keep its loads in the body */       \
        _Pragma("GCC unroll 64") for (int k = 0; k < STEPS; k++) {                                          \
            __m512 b0 = _mm512_loadu_ps(b + k * 64), b1 = _mm512_loadu_ps(b + k * 64 + 16);                 \
            __m512 b2 = _mm512_loadu_ps(b + k * 64 + 32), b3 = _mm512_loadu_ps(b + k * 64 + 48);            \
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                           \
                __m512 av = _mm512_set1_ps((a)[k * 4 + i]);                                                 \
                acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);                                             \
                acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);                                             \
                acc[i][2] = _mm512_fmadd_ps(av, b2, acc[i][2]);                                             \
                acc[i][3] = _mm512_fmadd_ps(av, b3, acc[i][3]);                                             \
            }                                                                                               \
        }                                                                                                   \
    } while (0)

#define LOAD_TILE(c) for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] = _mm512_loadu_ps((c) + i * 64 + j * 16)
#define STORE_TILE(c) for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) _mm512_storeu_ps((c) + i * 64 + j * 16, acc[i][j])

__attribute__((noinline)) static void run_registers(float *C, const float *A, long astride, const float *B, int reps) {
    for (int rep = 0; rep < reps; rep++) {
        __m512 acc[4][4];
        LOAD_TILE(C);
        for (int r = 0; r < BLOCKS; r++) BODY(A + r * astride);
        STORE_TILE(C);
    }
}

__attribute__((noinline)) static void run_reload(float *C, long cstride, const float *A, long astride, const float *B,
                                                 int reps) {
    for (int rep = 0; rep < reps; rep++)
        for (int r = 0; r < BLOCKS; r++) {
            __m512 acc[4][4];
            LOAD_TILE(C + r * cstride);
            BODY(A + r * astride);
            STORE_TILE(C + r * cstride);
        }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5, reps = argc > 2 ? atoi(argv[2]) : 20000;
    size_t bytes = (size_t)64 << 20;
    char *pool = aligned_alloc(4096, bytes);
    memset(pool, 0, bytes);
    float *B = (float *)pool; /* the B slice starts on a 4 KiB boundary */
    float *A = (float *)(pool + (1 << 20) + 3584); /* A's row blocks 4 KiB apart, 3.5 KiB into each page */
    for (int i = 0; i < STEPS * 64; i++) B[i] = 1e-3f;
    for (long i = 0; i < (long)BLOCKS * 1024; i++) A[i] = 1e-3f;
    struct { const char *name; char *C; long cstride; int in_registers; } v[] = {
        {"registers", pool + (8 << 20), 256, 1},
        {"reload, blocks 1 KiB apart", pool + (8 << 20), 256, 0},
        {"reload, blocks 4 KiB apart at 0 mod 4 KiB", pool + (16 << 20), 1024, 0},
        {"reload, blocks 4 KiB apart at 1 KiB mod 4 KiB", pool + (24 << 20) + 1024, 1024, 0},
        {"reload, blocks 4 KiB apart at 2 KiB mod 4 KiB", pool + (32 << 20) + 2048, 1024, 0},
        {"reload, blocks 4 KiB apart at 3 KiB mod 4 KiB", pool + (40 << 20) + 3072, 1024, 0},
    };
    int n = sizeof v / sizeof v[0];
    printf("steps %d blocks %d reps %d\n", STEPS, BLOCKS, reps);
    for (int round = 0; round < rounds; round++)
        for (int i = 0; i < n; i++) {
            double t = now();
            if (v[i].in_registers)
                run_registers((float *)v[i].C, A, 1024, B, reps);
            else
                run_reload((float *)v[i].C, v[i].cstride, A, 1024, B, reps);
            printf("%d\t%s\t%.9f\n", round, v[i].name, now() - t);
        }
    return 0;
}
