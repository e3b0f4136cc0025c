/*
 * distil_head.h - the per-head logit options of docs/SPEC.md §6, written once for every backend
 * (the float64 reference, the cpu backend, CUDA/HIP device code and OpenCL C evaluate this text):
 * a logit scale s > 0 and a softcap c >= 0,
 *   z' = c tanh(u),  u = s z / c   (c = 0: z' = s z),
 *   dz'/dz = s (1 - tanh^2(u)) = s 4e / (1 + e)^2,  e = exp(-2 |u|)   (c = 0: s).
 * The derivative is taken from the logit z itself, in the exponential form: each factor is
 * relatively accurate for every u, so a saturated element (|u| of 5, 20, 80) gets its small
 * derivative to a few ulp. Taken from the capped value instead, 1 - t^2 with t = z' / c loses all
 * digits once 1 - |t| nears the rounding of z' (|u| ~ 8 in fp32): a row whose logits all
 * saturate would get a gradient of noise. So the head pass (head_rows) writes dz'/dz beside z'.
 *
 * The includer defines DE_T, DE_S, DE_FN and DE_K as for distil_elem.h (that header need not be
 * included), and DH_TANH(a), DH_EXP(a): tanh and exp of a DE_S. Everything here is scalar.
 */
#ifndef DISTIL_HEAD_H
#define DISTIL_HEAD_H

/* z' = cap tanh(scale z / cap), or scale z when cap is 0. */
DE_FN DE_S dh_cap(DE_S z, DE_S scale, DE_S cap) {
    return cap > DE_K(0.0) ? cap * DH_TANH(scale * z / cap) : scale * z;
}

/* dz'/dz at the logit z (before the transform): scale when cap is 0; NaN for a NaN z, 0 for an
 * infinite one. */
DE_FN DE_S dh_dcap(DE_S z, DE_S scale, DE_S cap) {
    if (cap == DE_K(0.0)) {
        return scale;
    }
    DE_S u = scale * z / cap;
    DE_S e = DH_EXP(DE_K(-2.0) * (u < DE_K(0.0) ? -u : u));
    DE_S r = DE_K(1.0) + e;
    return scale * (DE_K(4.0) * e) / (r * r);
}

#endif /* DISTIL_HEAD_H */
