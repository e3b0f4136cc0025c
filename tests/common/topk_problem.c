/* topk_problem.c - see topk_problem.h. */
#include "topk_problem.h"
#include "test_problems.h" /* tp_div_name */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TK_LOSS_SLOTS = 4 }; /* loss values past the written ones that must stay poisoned */

/* Teacher logits of one row (v), by kind. */
static void tk_teacher_logits(tu_rng *r, tk_teacher kind, int64_t v, double *z) {
    for (int64_t u = 0; u < v; u++) {
        z[u] = 3.0 * tu_rand_normal(r);
    }
    if (kind == TK_PEAKY) {
        z[tu_rand_int(r, v)] += 25.0;
    } else if (kind == TK_ZIPF) {
        /* the rank of entry u is its position after a random shuffle of the ranks */
        for (int64_t u = 0; u < v; u++) {
            z[u] = -1.1 * log((double)(u + 1));
        }
        for (int64_t u = v - 1; u > 0; u--) {
            int64_t w = tu_rand_int(r, u + 1);
            double t = z[u];
            z[u] = z[w];
            z[w] = t;
        }
    }
}

static const double *g_sort_key;
static int tk_by_key_desc(const void *a, const void *b) {
    double x = g_sort_key[*(const int64_t *)a], y = g_sort_key[*(const int64_t *)b];
    return x < y ? 1 : (x > y ? -1 : 0);
}

static void tk_set_id(tk_problem *p, size_t i, int64_t id) {
    if (p->s.idt == DISTIL_IDS_I64) {
        ((int64_t *)p->ids)[i] = id;
    } else {
        ((int32_t *)p->ids)[i] = (int32_t)id;
    }
}

/* Row i of the cached teacher: its top k of log-softmax(z), slots shuffled on odd rows, pads. */
static void tk_teacher_row(tu_rng *r, tk_problem *p, int64_t i, double *z, int64_t *order) {
    const int64_t v = p->s.v, k = p->s.k;
    tk_teacher_logits(r, p->s.teacher, v, z);
    double m = -INFINITY, s = 0.0;
    for (int64_t u = 0; u < v; u++) {
        m = fmax(m, z[u]);
    }
    for (int64_t u = 0; u < v; u++) {
        s += exp(z[u] - m);
    }
    for (int64_t u = 0; u < v; u++) {
        order[u] = u;
        z[u] -= m + log(s);
    }
    g_sort_key = z;
    qsort(order, (size_t)v, sizeof *order, tk_by_key_desc);
    for (int64_t j = 1; (i & 1) && j < k; j++) {
        int64_t w = tu_rand_int(r, j + 1), t = order[j];
        order[j] = order[w];
        order[w] = t;
    }
    int64_t used = (p->s.pad && i % 3 == 2) ? (k / 2 > 0 ? k / 2 : 1) : k;
    for (int64_t j = 0; j < k; j++) {
        size_t e = (size_t)(i * k + j);
        tk_set_id(p, e, j < used ? order[j] : -1);
        tu_set(p->logp, p->s.tdtype, e, j < used ? (float)z[order[j]] : 0.0f);
    }
    if (p->s.dup_row > 0 && i == p->s.dup_row && k >= 2) {
        tk_set_id(p, (size_t)(i * k + 1), order[0]);
    }
}

void tk_make(tk_problem *p, const tk_spec *s, distil_dtype dtype, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->s = *s;
    if (p->s.w_hard == 0.0f && p->s.w_soft == 0.0f) {
        p->s.w_hard = p->s.w_soft = 0.5f;
    }
    p->s.tau = p->s.tau > 0.0f ? p->s.tau : 1.0f;
    p->s.hs = p->s.hs > 0 ? p->s.hs : 32;
    s = &p->s;
    p->dtype = dtype;
    tu_rng r = tu_rng_make(seed);
    const size_t t = (size_t)s->t, v = (size_t)s->v, k = (size_t)s->k,
                 es = distil_dtype_size(dtype);
    if (s->fused) {
        p->xs = malloc(t * (size_t)s->hs * es);
        p->ws = malloc(v * (size_t)s->hs * es);
        tu_fill_normal(&r, p->xs, dtype, t * (size_t)s->hs, 1.0);
        const double std = s->student_std > 0.0f ? s->student_std : 2.0;
        tu_fill_normal(&r, p->ws, dtype, v * (size_t)s->hs, std / sqrt((double)s->hs));
        if (s->bias) {
            p->bs = malloc(v * es);
            tu_fill_normal(&r, p->bs, dtype, v, 0.5);
        }
    } else {
        p->x = malloc(t * v * es);
        tu_fill_logp(&r, p->x, dtype, s->t, s->v, s->v, 2.0, NULL);
    }
    p->ids = malloc(t * k * (s->idt == DISTIL_IDS_I64 ? 8 : 4));
    p->logp = malloc(t * k * distil_dtype_size(s->tdtype));
    p->labels = malloc(t * sizeof(int64_t));
    double *z = malloc(v * sizeof(double));
    int64_t *order = malloc(v * sizeof(int64_t));
    for (int64_t i = 0; i < s->t; i++) {
        tk_teacher_row(&r, p, i, z, order);
        p->labels[i] = (s->mixed_labels && i % 3 == 1) ? -100 : tu_rand_int(&r, s->v);
    }
    free(z);
    free(order);
    if (s->div == DISTIL_DIVERGENCE_TVD) {
        tk_untie(p);
    }
}

void tk_free(tk_problem *p) {
    free(p->xs), free(p->ws), free(p->bs), free(p->x);
    free(p->ids), free(p->logp), free(p->labels);
}

size_t tk_nloss(const tk_problem *p) {
    if (p->s.fused) {
        return p->s.parts ? 3 : 1;
    }
    return p->s.red == DISTIL_REDUCTION_NONE ? (size_t)p->s.t : 1;
}

static size_t tk_ids_bytes(const tk_problem *p) {
    return (size_t)(p->s.t * p->s.k) * (p->s.idt == DISTIL_IDS_I64 ? 8 : 4);
}

static void *tk_out_alloc(distil_ctx *ctx, size_t bytes, void **host) {
    *host = malloc(bytes ? bytes : 1);
    return bytes ? tu_alloc_poisoned(ctx, bytes) : NULL;
}

static void tk_finish(distil_ctx *ctx, distil_status st, tk_out *o) {
    if (st == DISTIL_OK) {
        st = distil_ctx_synchronize(ctx);
    }
    o->st = st;
    snprintf(o->msg, sizeof o->msg, "%s", st == DISTIL_OK ? "" : distil_ctx_last_error(ctx));
}

static void tk_run_fused(distil_ctx *ctx, const tk_problem *p, tk_out *o, void *dloss) {
    const tk_spec *s = &p->s;
    const size_t es = distil_dtype_size(p->dtype), t = (size_t)s->t, v = (size_t)s->v;
    distil_fused_linear_topk_desc d;
    distil_fused_linear_topk_desc_init(&d);
    d.rows = s->t, d.vocab = s->v, d.student_hidden = s->hs, d.k = s->k, d.dtype = p->dtype;
    d.teacher_dtype = s->tdtype, d.id_dtype = s->idt, d.tail = s->tail, d.divergence = s->div;
    d.beta = s->beta, d.alpha = s->alpha, d.weight_hard = s->w_hard, d.weight_soft = s->w_soft;
    d.temperature = s->tau, d.chunk_rows = s->chunk, d.return_parts = s->parts;
    d.reduction = s->red, d.normaliser = s->normaliser;
    void *xs = tu_upload(ctx, p->xs, t * (size_t)s->hs * es);
    void *ws = tu_upload(ctx, p->ws, v * (size_t)s->hs * es);
    void *bs = s->bias ? tu_upload(ctx, p->bs, v * es) : NULL;
    void *ids = tu_upload(ctx, p->ids, tk_ids_bytes(p));
    void *logp = tu_upload(ctx, p->logp, t * (size_t)s->k * distil_dtype_size(s->tdtype));
    void *lab = s->w_hard != 0.0f || s->mixed_labels ? tu_upload(ctx, p->labels, t * 8) : NULL;
    void *gx = tk_out_alloc(ctx, t * (size_t)s->hs * es, &o->gx);
    void *gw = tk_out_alloc(ctx, v * (size_t)s->hs * es, &o->gw);
    void *gb = tk_out_alloc(ctx, s->bias ? v * es : 0, &o->gb);
    distil_status st =
        distil_fused_linear_topk(ctx, &d, xs, ws, bs, ids, logp, lab, dloss, gx, gw, gb);
    tk_finish(ctx, st, o);
    tu_download(ctx, o->gx, gx, t * (size_t)s->hs * es);
    tu_download(ctx, o->gw, gw, v * (size_t)s->hs * es);
    if (gb) {
        tu_download(ctx, o->gb, gb, v * es);
    }
    void *bufs[] = {xs, ws, bs, ids, logp, lab, gx, gw, gb};
    for (size_t i = 0; i < TU_LEN(bufs); i++) {
        distil_free(ctx, bufs[i]);
    }
}

static void tk_run_logp(distil_ctx *ctx, const tk_problem *p, tk_out *o, void *dloss) {
    const tk_spec *s = &p->s;
    const size_t es = distil_dtype_size(p->dtype), t = (size_t)s->t, v = (size_t)s->v;
    distil_topk_desc d;
    distil_topk_desc_init(&d);
    d.rows = s->t, d.vocab = s->v, d.k = s->k, d.dtype = p->dtype, d.teacher_dtype = s->tdtype;
    d.id_dtype = s->idt, d.tail = s->tail, d.divergence = s->div, d.beta = s->beta;
    d.alpha = s->alpha;
    d.reduction = s->red, d.normaliser = s->normaliser;
    void *x = tu_upload(ctx, p->x, t * v * es);
    void *ids = tu_upload(ctx, p->ids, tk_ids_bytes(p));
    void *logp = tu_upload(ctx, p->logp, t * (size_t)s->k * distil_dtype_size(s->tdtype));
    void *lab = s->mixed_labels ? tu_upload(ctx, p->labels, t * 8) : NULL;
    void *gx = tk_out_alloc(ctx, t * v * es, &o->gx);
    distil_status st = distil_topk(ctx, &d, x, ids, logp, lab, dloss, gx);
    tk_finish(ctx, st, o);
    tu_download(ctx, o->gx, gx, t * v * es);
    void *bufs[] = {x, ids, logp, lab, gx};
    for (size_t i = 0; i < TU_LEN(bufs); i++) {
        distil_free(ctx, bufs[i]);
    }
}

void tk_run(distil_ctx *ctx, const tk_problem *p, tk_out *o) {
    memset(o, 0, sizeof *o);
    const size_t nl = (size_t)p->s.t + TK_LOSS_SLOTS;
    o->loss = malloc(nl * sizeof(float));
    void *dloss = tu_alloc_poisoned(ctx, nl * sizeof(float));
    if (p->s.fused) {
        tk_run_fused(ctx, p, o, dloss);
    } else {
        tk_run_logp(ctx, p, o, dloss);
    }
    tu_download(ctx, o->loss, dloss, nl * sizeof(float));
    distil_free(ctx, dloss);
}

void tk_out_free(tk_out *o) {
    free(o->loss), free(o->gx), free(o->gw), free(o->gb);
}

static double tk_norm(const void *v, distil_dtype dt, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = tu_get(v, dt, (size_t)i);
        s += x * x;
    }
    return sqrt(s);
}

/* ||got - ref|| <= tol ||ref|| + allowance (a norm): relative where ref is not all 0 (the
 * tensor check, with the allowance relative to ||ref||), absolute where it is (renormalise with
 * one used slot: exactly 0, an fp32 residue of about 16 ulp of g). */
static void tk_check_grad(const char *what, const void *got, const void *ref, distil_dtype dt,
                          int64_t rows, int64_t width, double tol, double allowance) {
    const double nr = tk_norm(ref, dt, rows * width);
    if (nr > 0.0) {
        TU_CHECK_TENSOR(what, got, ref, dt, rows, width, width, tol + allowance / nr);
        return;
    }
    const double ng = tk_norm(got, dt, rows * width);
    if (!(ng <= allowance)) {
        fail_msg("%s: ||out|| = %g where ref is 0, allowance %g", what, ng, allowance);
    }
}

void tk_check_same(const tk_problem *p, const tk_out *a, const tk_out *b) {
    const size_t es = distil_dtype_size(p->dtype), t = (size_t)p->s.t, v = (size_t)p->s.v;
    assert_int_equal(a->st, DISTIL_OK);
    assert_int_equal(b->st, DISTIL_OK);
    TU_CHECK_BITWISE("loss", a->loss, b->loss, tk_nloss(p) * sizeof(float));
    if (p->s.fused) {
        TU_CHECK_BITWISE("grad_student_hidden", a->gx, b->gx, t * (size_t)p->s.hs * es);
        TU_CHECK_BITWISE("grad_student_weight", a->gw, b->gw, v * (size_t)p->s.hs * es);
        TU_CHECK_BITWISE("grad_student_bias", a->gb, b->gb, v * es);
    } else {
        TU_CHECK_BITWISE("grad_student", a->gx, b->gx, t * v * es);
    }
}

void tk_check(const tk_problem *p, const tk_out *o, const tk_out *r) {
    const tk_spec *s = &p->s;
    const distil_dtype dt = p->dtype;
    const size_t nl = tk_nloss(p);
    assert_int_equal(o->st, r->st);
    /* §3's bounds, plus what the formulas' roundings can do where the problem is ill-conditioned
     * (tk_allowance_of; about 16 ulp of each output elsewhere) */
    tk_allowance al = tk_allowance_of(p);
    for (size_t i = 0; i < nl; i++) {
        double tol = tu_tolerance(dt, TU_LOSS);
        if (r->loss[i] != 0.0f && isfinite(r->loss[i])) {
            tol += al.loss[i] / fabs((double)r->loss[i]);
        } else if (fabs((double)o->loss[i]) <= al.loss[i]) {
            continue; /* 0 in exact arithmetic (renormalise with one used slot): a residue */
        }
        TU_CHECK_REL("loss", o->loss[i], r->loss[i], tol);
    }
    free(al.loss);
    TU_CHECK_POISONED("loss past the written values", o->loss, DISTIL_F32, nl,
                      (size_t)s->t + TK_LOSS_SLOTS - nl);
    /* A truly infinite divergence (docs/SPEC.md §1: reverse KL where the teacher's tail is 0 but
     * the student's is not) is +inf in both; its gradient has no value to compare (inf - inf). */
    bool infinite = false;
    for (size_t i = 0; i < nl; i++) {
        infinite = infinite || isinf(r->loss[i]);
    }
    if (!s->fused) {
        TU_CHECK_WRITTEN("grad_student", o->gx, dt, s->t, s->v, s->v, infinite);
        if (!infinite) {
            tk_check_grad("grad_student", o->gx, r->gx, dt, s->t, s->v, tu_tolerance(dt, TU_GRAD),
                          al.gx);
        }
        return;
    }
    const double tol = tu_tolerance(dt, TU_GRAD_FUSED);
    TU_CHECK_WRITTEN("grad_student_hidden", o->gx, dt, s->t, s->hs, s->hs, infinite);
    TU_CHECK_WRITTEN("grad_student_weight", o->gw, dt, s->v, s->hs, s->hs, infinite);
    if (s->bias) {
        TU_CHECK_WRITTEN("grad_student_bias", o->gb, dt, 1, s->v, s->v, infinite);
    }
    if (infinite) {
        return;
    }
    tk_check_grad("grad_student_hidden", o->gx, r->gx, dt, s->t, s->hs, tol, al.gx);
    tk_check_grad("grad_student_weight", o->gw, r->gw, dt, s->v, s->hs, tol, al.gw);
    if (s->bias) {
        tk_check_grad("grad_student_bias", o->gb, r->gb, dt, 1, s->v, tol, al.gb);
    }
}

void tk_name(char *buf, size_t n, const tk_spec *s, distil_dtype dtype) {
    static const char *const tails[] = {"tail", "renormalise", "zero"};
    static const char *const teachers[] = {"normal", "peaky", "zipf"};
    snprintf(buf, n, "%s %s T%lld V%lld k%lld %s %s b%.2f a%.2f %s tau%.1f teacher-%s%s%s%s",
             s->fused ? "fused" : "logp", distil_dtype_name(dtype), (long long)s->t,
             (long long)s->v, (long long)s->k, tails[s->tail], tp_div_name(s->div), (double)s->beta,
             (double)s->alpha, distil_dtype_name(s->tdtype), (double)s->tau, teachers[s->teacher],
             s->pad ? " pad" : "", s->chunk ? " chunked" : "",
             s->student_std > 0.0f ? " peaky-student" : "");
}
