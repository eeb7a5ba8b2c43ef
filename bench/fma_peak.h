/* The core's arithmetic ceiling for the benches: the float multiply-add rate
 * one thread reaches on this machine (GFLOPS, a multiply-add counting as two),
 * measured with independent chains of the widest vectors the compiler targets
 * here (fma_peak.c is built with -march=native, as the generated kernels
 * are). A kernel cannot beat it; a ratio target that asks for more is out of
 * reach on this machine whatever the search does.
 *
 * Thread CPU time, the fastest of repeats; nothing allocated. Thread-safe. */
#ifndef KT_BENCH_FMA_PEAK_H
#define KT_BENCH_FMA_PEAK_H

/* GFLOPS of one thread's multiply-adds; *vector_bytes (if not NULL) gets the
 * vector width used. */
double kt_bench_fma_peak_gflops(int *vector_bytes);

#endif
