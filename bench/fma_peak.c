/* See fma_peak.h. Built with -march=native -ffp-contract=fast so that
 * a * b + c below is one fused multiply-add of the machine's widest vectors
 * (meson's -std=c17 alone would keep multiplies and adds apart). */
#include "fma_peak.h"

#include <time.h>

#if defined(__AVX512F__)
#define VB 64
#elif defined(__AVX__)
#define VB 32
#else
#define VB 16
#endif
/* Independent chains: enough to cover the multiply-add latency times the
 * number of units (4 cycles x 2 units on current x86 cores) without spilling
 * a 16-register file. */
#define CHAINS 10

typedef float vf_t __attribute__((vector_size(VB)));

static double thread_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double kt_bench_fma_peak_gflops(int *vector_bytes)
{
    volatile float seed = 1.0f; /* not a compile-time constant: nothing folds */
    vf_t acc[CHAINS], m, c;
    for (int l = 0; l < VB / 4; l++) {
        m[l] = seed * 0.999999f;
        c[l] = seed * 1e-7f;
    }
    for (int i = 0; i < CHAINS; i++)
        for (int l = 0; l < VB / 4; l++)
            acc[i][l] = seed * (float)(i + l);
    /* ~0.15 s per repeat at 3 GHz: a virtual machine's neighbours come and
     * go, and the fastest of a few longer repeats is the core's own rate */
    const long iters = 100000000;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = thread_now();
        for (long n = 0; n < iters; n++) {
#pragma GCC unroll 16
            for (int i = 0; i < CHAINS; i++)
                acc[i] = acc[i] * m + c;
        }
        double s = thread_now() - t0;
        double gf = (double)iters * CHAINS * (VB / 4) * 2 / s * 1e-9;
        if (gf > best)
            best = gf;
    }
    float sink = 0;
    for (int i = 0; i < CHAINS; i++)
        sink += acc[i][0];
    seed = sink; /* keeps the chains live */
    if (vector_bytes)
        *vector_bytes = VB;
    return best;
}
