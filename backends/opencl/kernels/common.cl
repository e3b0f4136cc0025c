/*
 * common.cl - helpers shared by every distil OpenCL program (opencl backend, OpenCL C 1.2):
 * dtype loads/stores, fixed-order work-group reductions and the SPEC section 1 element term.
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

/* Round to nearest even, NaN stays a (quiet) NaN; the same as core/half.h. */
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

/*
 * Sum of v over the work-group in a fixed tree order (deterministic for a fixed WG_SIZE).
 * scratch: WG_SIZE floats of local memory. Every work-item gets the total. Must be reached by
 * the whole work-group.
 */
float distil_group_sum(float v, __local float *scratch) {
    const uint lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s) {
            scratch[lid] += scratch[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* scratch may be reused right away */
    return total;
}

uint distil_group_sum_uint(uint v, __local uint *scratch) {
    const uint lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s) {
            scratch[lid] += scratch[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint total = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

/*
 * Online log-sum-exp: (m, s) stands for s * exp(m), m the running max. Adding v rescales the
 * sum when v is a new max, so no exp ever overflows. -inf entries add nothing; a NaN entry makes
 * s NaN (v > m is false for NaN), so NaN propagates to the result.
 */
void distil_lse_add(float *m, float *s, float v) {
    if (v > *m) {
        *s = *s * exp(*m - v) + 1.0f;
        *m = v;
    } else if (v != -INFINITY) {
        *s += exp(v - *m);
    }
}

/* Merge two (max, sum) pairs. */
void distil_lse_merge(float *m, float *s, float m2, float s2) {
    const float mx = *m > m2 ? *m : m2;
    if (mx == -INFINITY) {
        return; /* both empty */
    }
    *s = *s * exp(*m - mx) + s2 * exp(m2 - mx);
    *m = mx;
}

/*
 * Merge the work-group's (m, s) pairs in a fixed tree order and return (max, log sum) with
 * log-sum-exp = max + log sum. Keeping the two apart lets callers form (z - max) - log sum:
 * z - max is exact near the max, whereas rounding max + log sum to float first would cost an ulp
 * of the logit's magnitude (8e-6 at 100) in every probability. lm, ls: WG_SIZE floats.
 */
float2 distil_group_lse(float m, float s, __local float *lm, __local float *ls) {
    const uint lid = get_local_id(0);
    lm[lid] = m;
    ls[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = WG_SIZE / 2; h > 0; h >>= 1) {
        if (lid < h) {
            float mm = lm[lid];
            float ss = ls[lid];
            distil_lse_merge(&mm, &ss, lm[lid + h], ls[lid + h]);
            lm[lid] = mm;
            ls[lid] = ss;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 r = (float2)(lm[0], log(ls[0])); /* all -inf: (-inf, -inf) */
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* exp2 / log2 of the element terms: the hardware's approximations where the tuning table
 * enables them (error ~2 ulp, and 2^-22 absolute for log2 near 1), else the accurate ones. */
#ifndef DISTIL_FAST_MATH
#define DISTIL_FAST_MATH 0
#endif
#if DISTIL_FAST_MATH
#define DISTIL_EXP2(v) native_exp2(v)
#define DISTIL_LOG2(v) native_log2(v)
#else
#define DISTIL_EXP2(v) exp2(v)
#define DISTIL_LOG2(v) log2(v)
#endif
#define DISTIL_LOG2E 1.4426950408889634f
#define DISTIL_LN2   0.6931471805599453f

/* log2(1 + 2^t) for t <= 0: 1 + 2^t lies in [1, 2], so no overflow and no cancellation. */
float distil_softplus2_neg(float t) {
    return DISTIL_LOG2(1.0f + DISTIL_EXP2(t));
}

/*
 * SPEC section 1 for one element: returns e(x, y) and stores de/dx in *dx, with x = log q
 * (student), y = log p (teacher), lb2 = log2(beta), l1b2 = log2(1 - beta) (distil_log2_beta).
 *   beta == 0:  e = p (y - x)                      de/dx = -p
 *   beta == 1:  e = q (x - y)                      de/dx = q (x - y + 1)
 *   otherwise:  e = beta p (y - lm) + (1 - beta) q (x - lm),  de/dx = (1 - beta) q (x - lm)
 * with lm = log m = logaddexp(lb + y, l1b + x), computed in log space so that two tiny
 * probabilities never give log 0. A term whose probability is 0 is exactly 0 (0 log 0 = 0),
 * also when the other one makes d infinite or NaN (both -inf). Computed in base 2.
 */
float distil_jsd_elem(float x, float y, float beta, float lb2, float l1b2, float *dx) {
    const float x2 = x * DISTIL_LOG2E;
    const float y2 = y * DISTIL_LOG2E;
    if (beta == 0.0f) {
        const float p = DISTIL_EXP2(y2);
        *dx = -p;
        return p == 0.0f ? 0.0f : p * (y - x);
    }
    if (beta == 1.0f) {
        const float q = DISTIL_EXP2(x2);
        if (q == 0.0f) {
            *dx = 0.0f;
            return 0.0f;
        }
        *dx = q * (x - y + 1.0f);
        return q * (x - y);
    }
    /* With d = log2((1 - beta) q) - log2(beta p), log2 m = lb2 + y2 + sp(d) = l1b2 + x2 + sp(-d)
     * for sp(t) = log2(1 + 2^t): both differences to log m come out directly, without
     * cancelling two large numbers (identical inputs at beta = 0.5 give ln 2 - ln 2). A NaN
     * input gives a NaN d, which reaches e. */
    const float d = (x2 - y2) + (l1b2 - lb2);
    const float spn = distil_softplus2_neg(-fabs(d));
    const float sp_neg = d > 0.0f ? spn : spn - d; /* sp(-d) */
    const float sp_pos = d > 0.0f ? spn + d : spn; /* sp(d) */
    const float p = DISTIL_EXP2(y2);
    const float q = DISTIL_EXP2(x2);
    const float ep = p == 0.0f ? 0.0f : beta * p * (-lb2 - sp_pos) * DISTIL_LN2;
    const float gq = q == 0.0f ? 0.0f : (1.0f - beta) * q * (-l1b2 - sp_neg) * DISTIL_LN2;
    *dx = gq;
    return ep + gq;
}

/* log2(beta) and log2(1 - beta) for distil_jsd_elem (unused at the endpoints), computed in
 * base 2 directly: log(beta) * log2(e) rounded (or fused into a later FMA by the compiler) left
 * -log2(0.5) - 1 at 4e-9 instead of 0, a loss of -2e-9 for V = 1 on NVIDIA's OpenCL. */
float distil_log2_beta(float beta) {
    return beta > 0.0f && beta < 1.0f ? log2(beta) : 0.0f;
}
float distil_log2_1m_beta(float beta) {
    return beta > 0.0f && beta < 1.0f ? log2(1.0f - beta) : 0.0f;
}
