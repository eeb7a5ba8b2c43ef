/*
 * CUDA's built-ins for the CPU: g++ reads this header (-include) before the
 * unchanged CUDA source that NVRTC compiles, so that source runs on the CPU
 * (cuda_cpu.h describes the whole scheme; cuda_cpu_runtime.cpp implements
 * the functions declared here). C++17, compiled at run time, never by the
 * ktune build itself.
 *
 * What the kernel text sees:
 * - threadIdx, blockIdx, blockDim, gridDim: globals the runtime sets before
 *   it switches to a thread, so each thread (a fiber) reads its own.
 * - __shared__: static storage in the section kt_shared. Blocks run one
 *   after another, so one static copy is the block's; the runtime fills the
 *   section with NaN before each block.
 * - __syncthreads(), __shfl_*_sync(): switch to the next thread of the
 *   block until every thread (barrier) or every lane of the mask (shuffle)
 *   has arrived; values are exchanged at the call.
 * - float2 / float4: a copy through them checks CUDA's alignment rule (8 or
 *   16 bytes) on both sides and reports a misaligned one as a fault.
 */
#ifndef KT_CUDA_CPU_PRELUDE_H
#define KT_CUDA_CPU_PRELUDE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Function and variable qualifiers: all code is host code here. */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
/* The bound is checked at launch from the text (cuda_cpu.c reads it). */
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ __attribute__((section("kt_shared"))) static
#define __constant__ static const
/* __restrict__ is a g++ keyword already. */

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

/* ---- faults: report, stop the launch (never return) ---- */

[[noreturn]] void kt_cuda_cpu_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Through an asm barrier, so the compiler cannot assume the alignment the
 * pointer's type promises and fold the check away. */
inline void kt_cuda_cpu_check_align(const void *p, unsigned bytes, const char *type)
{
    uintptr_t v = (uintptr_t)p;
    __asm__("" : "+r"(v));
    if (v % bytes)
        kt_cuda_cpu_fault("misaligned %s access at %p (CUDA needs %u-byte alignment)", type, p,
                          bytes);
}

/* ---- vector types: every copy checks both addresses ---- */

struct float2 {
    float x, y;
    float2() = default;
    float2(const float2 &o)
    {
        kt_cuda_cpu_check_align(this, 8, "float2");
        kt_cuda_cpu_check_align(&o, 8, "float2");
        x = o.x;
        y = o.y;
    }
    float2 &operator=(const float2 &o)
    {
        kt_cuda_cpu_check_align(this, 8, "float2");
        kt_cuda_cpu_check_align(&o, 8, "float2");
        x = o.x;
        y = o.y;
        return *this;
    }
};

struct float4 {
    float x, y, z, w;
    float4() = default;
    float4(const float4 &o)
    {
        kt_cuda_cpu_check_align(this, 16, "float4");
        kt_cuda_cpu_check_align(&o, 16, "float4");
        x = o.x;
        y = o.y;
        z = o.z;
        w = o.w;
    }
    float4 &operator=(const float4 &o)
    {
        kt_cuda_cpu_check_align(this, 16, "float4");
        kt_cuda_cpu_check_align(&o, 16, "float4");
        x = o.x;
        y = o.y;
        z = o.z;
        w = o.w;
        return *this;
    }
};

inline float2 make_float2(float x, float y)
{
    float2 r;
    r.x = x;
    r.y = y;
    return r;
}
inline float4 make_float4(float x, float y, float z, float w)
{
    float4 r;
    r.x = x;
    r.y = y;
    r.z = z;
    r.w = w;
    return r;
}

/* ---- synchronization and warp exchange ---- */

void __syncthreads();

/* Shuffle kinds of kt_cuda_cpu_shfl. */
enum { KT_CUDA_CPU_SHFL_IDX, KT_CUDA_CPU_SHFL_UP, KT_CUDA_CPU_SHFL_DOWN, KT_CUDA_CPU_SHFL_XOR };
uint32_t kt_cuda_cpu_shfl(unsigned mask, uint32_t v, int kind, int arg, int width);

inline uint32_t kt_cuda_cpu_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
inline float kt_cuda_cpu_float(uint32_t u)
{
    float v;
    memcpy(&v, &u, 4);
    return v;
}

inline float __shfl_sync(unsigned mask, float v, int src, int width = 32)
{
    return kt_cuda_cpu_float(kt_cuda_cpu_shfl(mask, kt_cuda_cpu_bits(v), KT_CUDA_CPU_SHFL_IDX, src, width));
}
inline float __shfl_up_sync(unsigned mask, float v, unsigned d, int width = 32)
{
    return kt_cuda_cpu_float(kt_cuda_cpu_shfl(mask, kt_cuda_cpu_bits(v), KT_CUDA_CPU_SHFL_UP, (int)d, width));
}
inline float __shfl_down_sync(unsigned mask, float v, unsigned d, int width = 32)
{
    return kt_cuda_cpu_float(kt_cuda_cpu_shfl(mask, kt_cuda_cpu_bits(v), KT_CUDA_CPU_SHFL_DOWN, (int)d, width));
}
inline float __shfl_xor_sync(unsigned mask, float v, int m, int width = 32)
{
    return kt_cuda_cpu_float(kt_cuda_cpu_shfl(mask, kt_cuda_cpu_bits(v), KT_CUDA_CPU_SHFL_XOR, m, width));
}
inline int __shfl_sync(unsigned mask, int v, int src, int width = 32)
{
    return (int)kt_cuda_cpu_shfl(mask, (uint32_t)v, KT_CUDA_CPU_SHFL_IDX, src, width);
}
inline int __shfl_up_sync(unsigned mask, int v, unsigned d, int width = 32)
{
    return (int)kt_cuda_cpu_shfl(mask, (uint32_t)v, KT_CUDA_CPU_SHFL_UP, (int)d, width);
}
inline int __shfl_down_sync(unsigned mask, int v, unsigned d, int width = 32)
{
    return (int)kt_cuda_cpu_shfl(mask, (uint32_t)v, KT_CUDA_CPU_SHFL_DOWN, (int)d, width);
}
inline int __shfl_xor_sync(unsigned mask, int v, int m, int width = 32)
{
    return (int)kt_cuda_cpu_shfl(mask, (uint32_t)v, KT_CUDA_CPU_SHFL_XOR, m, width);
}

/* Threads of a block never run at the same time, so a plain update is
 * atomic; it returns the old value like CUDA's. */
inline float atomicAdd(float *p, float v)
{
    float old = *p;
    *p = old + v;
    return old;
}
inline int atomicAdd(int *p, int v)
{
    int old = *p;
    *p = old + v;
    return old;
}
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = old + v;
    return old;
}

/* ---- device math without headers ---- */

inline float __int_as_float(int i)
{
    return kt_cuda_cpu_float((uint32_t)i);
}
inline int __float_as_int(float f)
{
    return (int)kt_cuda_cpu_bits(f);
}
inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
inline float __expf(float x)
{
    return expf(x);
}
inline float __fdividef(float a, float b)
{
    return a / b;
}

#endif
