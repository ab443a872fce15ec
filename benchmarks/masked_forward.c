/* A value stored and loaded back at once, in a dependent chain (benchmarks/masked_forward.py builds and runs this):
 * each iteration loads 8 floats, adds to them and stores them to the same address, so the next iteration's load
 * waits for this store. The cases differ in the masks of the store and the load: none, all 8 lanes, or the 6 of a
 * masked tail (0x3f, as LLVM stores lanes 8-13 of a row of 14). Where the core forwards the store to the load, an
 * iteration costs the forwarding latency and the add; where it cannot, the load waits until the store is written. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static float buf[64] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CASE(NAME, LOAD, STORE)                                                       \
    __attribute__((noinline)) static double NAME(long iters) {                        \
        const __mmask8 tail = 0x3f, all = 0xff;                                       \
        __m256 b = _mm256_set1_ps(1e-9f);                                             \
        (void)tail; (void)all;                                                        \
        double t = now();                                                             \
        for (long i = 0; i < iters; i++) {                                            \
            __m256 v = LOAD;                                                          \
            v = _mm256_add_ps(v, b);                                                  \
            STORE;                                                                    \
            __asm__ volatile("" ::: "memory");                                        \
        }                                                                             \
        return (now() - t) / iters;                                                   \
    }

CASE(plain, _mm256_loadu_ps(buf + 8), _mm256_storeu_ps(buf + 8, v))
CASE(all_lanes, _mm256_maskz_loadu_ps(all, buf + 8), _mm256_mask_storeu_ps(buf + 8, all, v))
CASE(tail, _mm256_maskz_loadu_ps(tail, buf + 8), _mm256_mask_storeu_ps(buf + 8, tail, v))
CASE(tail_store, _mm256_loadu_ps(buf + 8), _mm256_mask_storeu_ps(buf + 8, tail, v))
CASE(tail_load, _mm256_maskz_loadu_ps(tail, buf + 8), _mm256_storeu_ps(buf + 8, v))

int main(int argc, char** argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    long iters = argc > 2 ? atol(argv[2]) : 5000000;
    struct { const char* name; double (*fn)(long); } cases[] = {
        {"plain", plain}, {"all_lanes", all_lanes}, {"tail", tail}, {"tail_store", tail_store},
        {"tail_load", tail_load}};
    for (int r = 0; r < rounds; r++)
        for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++)
            printf("%d %s %.4f\n", r, cases[k].name, cases[k].fn(iters) * 1e9);
    return 0;
}
