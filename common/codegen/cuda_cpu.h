/*
 * CUDA kernels run on the CPU from the exact text NVRTC compiles: the check
 * behind `--verify` for GPU states when no GPU (or as well as one) is there.
 * It is not an emulation printed from the lowering (emit_cuda_emu.c is):
 * a mistake in the CUDA printer itself runs here.
 *
 * How: g++ compiles the CUDA source unchanged, with a prelude header
 * (cuda_cpu_prelude.h, -include) that supplies CUDA's built-ins, plus a
 * driver file: the runtime (cuda_cpu_runtime.cpp) and, per program,
 * `extern "C" int <entry>(float **bufs)` with the verify harness's calling
 * convention (verify.h), so kt_codegen_ref_check_so compares it with the
 * reference in a child process.
 *
 * The driver copies the buffers to "device" buffers (256-byte aligned,
 * NaN red zones of 4 KiB on both sides; a write there or into an input is
 * a fault), allocates the workspace filled with NaN, and runs the launches
 * of kt_codegen_cuda_t in order with their grid and block. Blocks run one
 * after another; the threads of a block are fibers (ucontext) on one OS
 * thread, each with its own stack, so registers and local arrays are per
 * thread; a thread runs until it reaches __syncthreads() or a warp shuffle
 * and then the next thread runs. Shared memory and the top of every stack
 * are filled with NaN before each block, so a read of something no thread
 * wrote (a missing barrier) shows in the answers.
 *
 * Faults (the kernel's entry returns 2 and prints "CUDA fault: ..." on
 * stderr, which the checker's message ends with): a float2/float4 access
 * off its 8/16-byte alignment; a shuffle whose mask leaves out the caller,
 * names lanes the block lacks, or reads a lane outside it; a deadlock
 * (threads waiting at a barrier or shuffle that others never reach); a
 * barrier after a thread exited; a block larger than the kernel's
 * __launch_bounds__ (CUDA refuses that launch) or than 1024 threads; a write
 * outside a buffer or into an input.
 *
 * Not modelled: warps running in lockstep (a kernel that relies on implicit
 * warp synchronization without __syncwarp is not CUDA-correct anyway), bank
 * conflicts, timing.
 *
 * Ownership: returned strings are malloc'd (caller frees). Thread-safe: the
 * functions only read their arguments.
 */
#ifndef KT_CODEGEN_CUDA_CPU_H
#define KT_CODEGEN_CUDA_CPU_H

#include "codegen/codegen.h"
#include "codegen/verify.h"
#include "te/te.h"
#include "util/sbuf.h"

/* g++ flags: answers only, so a light optimization compiles fast. Without
 * _FORTIFY_SOURCE, which compilers such as Ubuntu's turn on by default: its
 * checked longjmp aborts the runtime's switches between fiber stacks. */
#define KT_CUDA_CPU_CXXFLAGS "-std=c++17 -O1 -U_FORTIFY_SOURCE -shared -fPIC -w -x c++"
/* The compiler: $KT_CXX, else this. */
#define KT_CUDA_CPU_CXX "g++"

/* ---- the texts ---------------------------------------------------------------- */

/* The prelude header and the runtime, as compiled. */
const char *kt_cuda_cpu_prelude(void);
const char *kt_cuda_cpu_runtime(void);

/* ---- drivers ------------------------------------------------------------------ */

/* Append the driver of one program to b: declarations of its kernels and
 * int entry(float **bufs) running cu's launches. b must start with
 * kt_cuda_cpu_runtime() (once per file; several programs with distinct
 * entries may follow). src is the program's CUDA text: each kernel's
 * __launch_bounds__ is read from it. 0, or KT_EINVAL with a message. */
int kt_cuda_cpu_driver_into(const kt_dag_t *dag, const char *src, const kt_codegen_cuda_t *cu,
                            const char *entry, kt_sbuf_t *b);

/* ---- modules: what a CUDA Driver API stand-in loads ---------------------------- */

/* Append to b a module's text: src (the CUDA text, unchanged), then a table
 * of its `extern "C" __global__` kernels (the ones cuModuleGetFunction finds
 * by name) and two C functions a Driver API stand-in finds with dlsym:
 *   int kt_cuda_cpu_module_find(const char *name): the kernel's index, or -1;
 *   int kt_cuda_cpu_module_launch(int k, const unsigned grid[3],
 *       const unsigned block[3], void **params, char *msg, size_t cap):
 *       runs kernel k with cuLaunchKernel's params (params[i] points at the
 *       i-th parameter's value); 0, 1 a launch CUDA refuses (nothing ran),
 *       2 a fault while it ran; the reason in msg.
 * Each kernel's parameters are unpacked by a trampoline the compiler
 * derives from the kernel's own signature, so a struct passed by value is
 * copied with its real size, as CUDA's launch does. 0, or KT_EINVAL when
 * src has no such kernel. */
int kt_cuda_cpu_module_into(const char *src, kt_sbuf_t *b);

/* Compile src as a module (kt_cuda_cpu_module_into, with the runtime) into
 * the shared library so_path. Errors as kt_codegen_compile_files. */
int kt_cuda_cpu_module_compile(const char *src, const char *so_path, char **log);

/* ---- compile and check -------------------------------------------------------- */

/* Compile CUDA text src (unchanged) and a driver file into so_path. Errors
 * as kt_codegen_compile_files. */
int kt_cuda_cpu_compile(const char *src, const char *driver, const char *so_path, char **log);

/* Compile cu->src with its driver and check entry against the reference
 * (kt_codegen_ref_check_so): 0 when it passes; KT_EINVAL (compile error or
 * wrong answers), KT_EIO (a fault, a crash), KT_ETIMEOUT. *max_rel_err as
 * kt_codegen_ref_check. */
int kt_cuda_cpu_check(kt_codegen_ref_t *ref, const kt_dag_t *dag, const kt_codegen_cuda_t *cu,
                      const char *entry, double *max_rel_err);

#endif
