/*
 * head.cl - the head options of docs/SPEC.md §6 on one chunk of one head's fp32 logits (opencl
 * backend; common.cl, distil_elem.h and distil_head.h come first): each logit scaled and capped
 * in place (dh_cap) when transform, and each row's logsumexp at temperature 1 when has_lse. One
 * work-group per row, the fixed-order reduction of common.cl. Runs only when an option is on.
 *
 * z     (rows, vocab) float, dense, at element offset z_off
 * lse   (rows) float at lse_off, written when has_lse
 * dz    (rows, vocab) float at dz_off, written when has_dz (and transform): dz'/dz at each logit
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
distil_head_rows(__global float *z, ulong z_off, long vocab, int transform, float scale, float cap,
                 __global float *lse, ulong lse_off, int has_lse, __global float *dz, ulong dz_off,
                 int has_dz) {
    __local float red_m[WG_SIZE];
    __local distil_acc red_s[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = (int)get_local_id(0);
    __global float *zr = z + z_off + row * (ulong)vocab;
    __global float *dzr = dz + dz_off + row * (ulong)vocab;
    float m = -INFINITY;
    distil_acc s = 0.0f;
    for (long j = lid; j < vocab; j += WG_SIZE) {
        float v = zr[j];
        if (transform) {
            if (has_dz) {
                dzr[j] = dh_dcap(v, scale, cap); /* from z, before it goes */
            }
            v = dh_cap(v, scale, cap);
            zr[j] = v; /* each work-item reads and writes its own columns only */
        }
        distil_lse_add(&m, &s, v, 1.0f);
    }
    if (has_lse) { /* uniform: the whole work-group takes the branch or none of it */
        const float2 r = distil_group_lse(m, s, red_m, red_s, 1.0f);
        if (lid == 0) {
            lse[lse_off + row] = r.x + r.y;
        }
    }
}
