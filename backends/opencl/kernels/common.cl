/*
 * common.cl - helpers shared by every distil OpenCL program (opencl backend, OpenCL C 1.2):
 * dtype loads/stores, fixed-order work-group reductions and the docs/SPEC.md §1 element term.
 * The host prepends this file to each program's own source. Every tunable has a default here
 * so that each program also builds on its own; tuning.c passes per-device values with -D.
 */

/* Work-group size of the row and reduction kernels; a power of two. */
#ifndef WG_SIZE
#define WG_SIZE 256
#endif
/* Elements each work-item handles per step of a row loop (coalesced: k * WG_SIZE + lid). */
#ifndef VEC
#define VEC 1
#endif

/* Dtypes are tokens (f32, bf16, f16) so that they paste into type and function names. */
#ifndef DTYPE
#define DTYPE f32
#endif
#ifndef SRC_DTYPE
#define SRC_DTYPE DTYPE
#endif
#ifndef DST_DTYPE
#define DST_DTYPE DTYPE
#endif

#define DISTIL_CAT_(a, b) a##b
#define DISTIL_CAT(a, b)  DISTIL_CAT_(a, b)

/* Storage type of each dtype: bf16 and fp16 live in ushort and are converted by hand. */
#define distil_storage_f32  float
#define distil_storage_bf16 ushort
#define distil_storage_f16  ushort
#define STORAGE(d)          DISTIL_CAT(distil_storage_, d)
#define LOAD(d, p, i)       DISTIL_CAT(distil_load_, d)(p, i)
#define STORE(d, p, i, v)   DISTIL_CAT(distil_store_, d)(p, i, v)

#define T     STORAGE(DTYPE)
#define SRC_T STORAGE(SRC_DTYPE)
#define DST_T STORAGE(DST_DTYPE)

float distil_load_f32(__global const float *p, ulong i) {
    return p[i];
}

/* bf16 is the top half of an fp32: widening is exact. */
float distil_load_bf16(__global const ushort *p, ulong i) {
    return as_float((uint)p[i] << 16);
}

/* vload_half is core OpenCL 1.2 and needs no cl_khr_fp16. */
float distil_load_f16(__global const ushort *p, ulong i) {
    return vload_half(i, (__global const half *)p);
}

void distil_store_f32(__global float *p, ulong i, float v) {
    p[i] = v;
}

/* Round to nearest even, NaN stays a (quiet) NaN; the same as core/backend_api/half.h. */
void distil_store_bf16(__global ushort *p, ulong i, float v) {
    uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        p[i] = (ushort)((u >> 16) | 0x40u);
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    p[i] = (ushort)(u >> 16);
}

void distil_store_f16(__global ushort *p, ulong i, float v) {
    vstore_half_rte(v, i, (__global half *)p);
}

/* Row sums in double where the device has it (a KL's row sum cancels, and fp32 would add its
 * rounding to every term), else in float. */
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double distil_acc;
#else
typedef float distil_acc;
#endif

/*
 * NAME(v, scratch): sum of v (type T) over the work-group in a fixed tree order (deterministic for
 * a fixed WG_SIZE). scratch: WG_SIZE T of local memory. Every work-item gets the total. Must be
 * reached by the whole work-group.
 */
#define DISTIL_GROUP_SUM(NAME, T)                                                                  \
    T NAME(T v, __local T *scratch) {                                                              \
        const uint lid = get_local_id(0);                                                          \
        scratch[lid] = v;                                                                          \
        barrier(CLK_LOCAL_MEM_FENCE);                                                              \
        for (uint s = WG_SIZE / 2; s > 0; s >>= 1) {                                               \
            if (lid < s) {                                                                         \
                scratch[lid] += scratch[lid + s];                                                  \
            }                                                                                      \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        }                                                                                          \
        const T total = scratch[0];                                                                \
        barrier(CLK_LOCAL_MEM_FENCE); /* scratch may be reused right away */                       \
        return total;                                                                              \
    }
DISTIL_GROUP_SUM(distil_group_sum, float)
DISTIL_GROUP_SUM(distil_group_sum_uint, uint)
DISTIL_GROUP_SUM(distil_group_sum_acc, distil_acc)

/*
 * Online log-sum-exp of v * scale (scale > 0): (m, s) stands for s * exp(m * scale), m the running
 * max of v. Adding v rescales the sum when v is a new max, so no exp ever overflows; each term is
 * exp((v - m) * scale), the difference taken before the scaling, so that a large 1/tau does not
 * turn the rounding of v * scale into an error of every log-probability. -inf entries add
 * nothing; a NaN entry makes s NaN (v > m is false for NaN), so NaN propagates to the result.
 */
void distil_lse_add(float *m, distil_acc *s, float v, float scale) {
    if (v > *m) {
        *s = *s * exp((*m - v) * scale) + 1.0f;
        *m = v;
    } else if (v != -INFINITY) {
        *s += exp((v - *m) * scale);
    }
}

/* Merge two (max, sum) pairs. */
void distil_lse_merge(float *m, distil_acc *s, float m2, distil_acc s2, float scale) {
    const float mx = *m > m2 ? *m : m2;
    if (mx == -INFINITY) {
        return; /* both empty */
    }
    *s = *s * exp((*m - mx) * scale) + s2 * exp((m2 - mx) * scale);
    *m = mx;
}

/*
 * Merge the work-group's (m, s) pairs in a fixed tree order and return (max, log sum) with
 * log-sum-exp of v * scale = max * scale + log sum. Keeping the two apart lets callers form (z -
 * max) - log sum: z - max is exact near the max, whereas rounding max + log sum to float first
 * would cost an ulp of the logit's magnitude (8e-6 at 100) in every probability. The sum and its
 * log are taken in distil_acc: log sum is tiny where one logit dominates (a CE of 1e-9), and 1 +
 * 1e-9 is 1 in float. lm, ls: WG_SIZE values each.
 */
float2 distil_group_lse(float m, distil_acc s, __local float *lm, __local distil_acc *ls,
                        float scale) {
    const uint lid = get_local_id(0);
    lm[lid] = m;
    ls[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = WG_SIZE / 2; h > 0; h >>= 1) {
        if (lid < h) {
            float mm = lm[lid];
            distil_acc ss = ls[lid];
            distil_lse_merge(&mm, &ss, lm[lid + h], ls[lid + h], scale);
            lm[lid] = mm;
            ls[lid] = ss;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 r = (float2)(lm[0], (float)log(ls[0])); /* all -inf: (-inf, -inf) */
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* The element terms of docs/SPEC.md §1 come next, from core/backend_api/math/distil_elem.h (the
 * host puts it, after distil_div_list.h with their modes, after this file), in float with these
 * definitions. exp is the accurate one:
 * native_exp may flush subnormal probabilities (docs/SPEC.md §1) and its error is the
 * implementation's. */
#define DE_T float
#define DE_S float
#define DE_M int
#define DE_FN
#define DE_K(lit)       lit##f
#define DE_V(s)         (s)
#define DE_SEL(m, a, b) ((m) ? (a) : (b))
#define DE_ABS(a)       fabs(a)
#define DE_EXP(a)       exp(a)
#define DE_LOG(a)       log(a)   /* distil_topk.h */
#define DE_EXPM1(a)     expm1(a) /* distil_topk.h */
/* and the head options of docs/SPEC.md §6 (math/distil_head.h, after distil_elem.h), with a tanh
 * that is 1 where it saturates: from |a| = 9.010914 on, tanh(a) lies within half an ulp of +-1, but
 * PoCL's tanh returns 1 - 2^-24 there, low at every saturated logit by the same ulp, which the
 * softcap times 1/tau turns into a shift of the saturated log-probabilities against the others
 * (docs/SPEC.md §3: 9x the careful fp32 error of a fused soft loss with a teacher cap of 4.6 at
 * tau 0.08). Below that, PoCL's tanh is within 1.1 ulp, as glibc's. */
float distil_tanh(float a) {
    return fabs(a) >= 9.010914f ? copysign(1.0f, a) : tanh(a);
}
#define DH_TANH(a) distil_tanh(a)
#define DH_EXP(a)  exp(a)
