/*
 * test_problems.c - seeded host inputs of the two losses and one run of each on a context,
 * with every output poisoned first (see test_problems.h).
 */
#include "test_problems.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tp_labels_names[] = {"none", "mixed", "all-ignored"};

static void *tp_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* Valid labels random in [0, vocab), ignored ones ignore_index. */
static int64_t *tp_make_labels(tu_rng *r, int64_t rows, int64_t vocab, tp_labels mode,
                               int64_t ignore_index) {
    int64_t *labels = tp_xmalloc((size_t)rows * sizeof(int64_t));
    for (int64_t i = 0; i < rows; i++) {
        bool ignored = mode == TP_LABELS_ALL_IGNORED || (mode == TP_LABELS_MIXED && i % 3 == 1);
        labels[i] = ignored ? ignore_index : tu_rand_int(r, vocab);
    }
    return labels;
}

static void *tp_upload_opt(distil_ctx *ctx, const void *host, size_t bytes) {
    return host ? tu_upload(ctx, host, bytes) : NULL;
}

/* Download a device buffer into new host memory and free it; NULL stays NULL. */
static void *tp_download_free(distil_ctx *ctx, void *dev, size_t bytes) {
    if (!dev) {
        return NULL;
    }
    void *host = tp_xmalloc(bytes);
    tu_download(ctx, host, dev, bytes);
    distil_free(ctx, dev);
    return host;
}

/* ---------------------------------------------------------------- distil_jsd */

const char *tp_div_name(distil_divergence div) {
    const char *name = distil_divergence_name(div);
    return name != NULL ? name : "?";
}

int tp_div_count(void) {
    int n = 0;
    while (distil_divergence_name((distil_divergence)n) != NULL) {
        n++;
    }
    return n;
}

/* Where the spec's divergence stays finite with a probability of 0 on one side only: the
 * teacher's (p = 0 < q) and the student's (q = 0 < p) (docs/SPEC.md §1 and §6). */
static void tp_div_finite(const tp_jsd_spec *s, bool *teacher_zero, bool *student_zero) {
    float alpha = s->alpha != 0.0f ? s->alpha : 0.1f;
    switch (s->div) {
    case DISTIL_DIVERGENCE_FORWARD_KL:
        *teacher_zero = true, *student_zero = false;
        return;
    case DISTIL_DIVERGENCE_REVERSE_KL:
        *teacher_zero = false, *student_zero = true;
        return;
    case DISTIL_DIVERGENCE_SKEW_KL:
        *teacher_zero = true, *student_zero = alpha > 0.0f;
        return;
    case DISTIL_DIVERGENCE_SKEW_REVERSE_KL:
        *teacher_zero = alpha > 0.0f, *student_zero = true;
        return;
    case DISTIL_DIVERGENCE_TVD:
        *teacher_zero = *student_zero = true;
        return;
    default:
        *teacher_zero = s->beta<1.0f, *student_zero = s->beta> 0.0f;
        return;
    }
}

/* Masks: tokens masked in both, in the teacher only and in the student only where the
 * divergence stays finite then (tp_div_finite). Column 0 stays unmasked. */
static void tp_jsd_masks(tu_rng *r, const tp_jsd_spec *s, unsigned char *ms, unsigned char *mt) {
    size_t n = (size_t)(s->t * s->v);
    bool teacher_zero, student_zero;
    tp_div_finite(s, &teacher_zero, &student_zero);
    memset(ms, 0, n), memset(mt, 0, n);
    for (size_t k = 0; (s->special & TP_NEG_INF) && s->v > 1 && k < n; k++) {
        if (k % (size_t)s->v == 0) {
            continue;
        }
        double u = tu_rand_uniform(r);
        ms[k] = mt[k] = u < 0.1;
        mt[k] |= teacher_zero && u > 0.95;
        ms[k] |= student_zero && u > 0.9 && u <= 0.95;
    }
}

static void tp_jsd_desc(tp_jsd *p, distil_dtype dt) {
    const tp_jsd_spec *s = &p->s;
    distil_jsd_desc_init(&p->d);
    p->d.rows = s->t, p->d.vocab = s->v, p->d.dtype = dt, p->d.beta = s->beta;
    p->d.reduction = s->red, p->d.grad_scale = s->grad_scale != 0.0f ? s->grad_scale : 1.0f;
    p->xs = s->v + s->pad_x, p->ys = s->v + s->pad_y;
    p->gs = s->grad == TP_GRAD_INPLACE ? p->xs : s->v + s->pad_g;
    p->d.student_stride = s->pad_x ? p->xs : 0, p->d.teacher_stride = s->pad_y ? p->ys : 0;
    p->d.grad_stride = (s->grad == TP_GRAD_INPLACE ? s->pad_x : s->pad_g) ? p->gs : 0;
    p->nloss = s->red == DISTIL_REDUCTION_NONE ? (size_t)s->t : 1;
    p->d.divergence = s->div;
    p->d.alpha = s->alpha != 0.0f ? s->alpha : p->d.alpha;
    p->d.normaliser = s->norm_device ? 0.0f : s->normaliser;
}

/* The spec's device normaliser (NULL when it has none). */
static void *tp_norm_upload(distil_ctx *ctx, bool norm_device, float normaliser) {
    return norm_device ? tu_upload(ctx, &normaliser, sizeof normaliser) : NULL;
}

void tp_jsd_make(tp_jsd *p, const tp_jsd_spec *s, distil_dtype dt, uint64_t seed) {
    tu_rng r = tu_rng_make(seed);
    p->s = *s;
    tp_jsd_desc(p, dt);
    size_t es = distil_dtype_size(dt), xb = (size_t)(s->t * p->xs) * es;
    size_t yb = (size_t)(s->t * p->ys) * es;
    p->x = tp_xmalloc(xb), p->y = tp_xmalloc(yb);
    tu_poison(p->x, xb), tu_poison(p->y, yb);
    unsigned char *ms = tp_xmalloc((size_t)(s->t * s->v)), *mt = tp_xmalloc((size_t)(s->t * s->v));
    tp_jsd_masks(&r, s, ms, mt);
    tu_fill_logp(&r, p->x, dt, s->t, s->v, p->xs, 2.0, ms);
    tu_fill_logp(&r, p->y, dt, s->t, s->v, p->ys, 2.0, mt);
    for (int64_t i = 0; (s->special & TP_TINY) && s->v > 2 && i < s->t; i++) {
        tu_set(p->x, dt, (size_t)(i * p->xs + 1), -120.0f); /* exp underflows in fp32 */
        tu_set(p->y, dt, (size_t)(i * p->ys + 1), -121.5f);
        tu_set(p->x, dt, (size_t)(i * p->xs + 2), -118.0f);
    }
    free(ms), free(mt);
    p->labels = s->labels == TP_LABELS_NONE
                    ? NULL
                    : tp_make_labels(&r, s->t, s->v, s->labels, p->d.ignore_index);
}

void tp_jsd_free(tp_jsd *p) {
    free(p->x), free(p->y), free(p->labels);
}

void tp_jsd_run(distil_ctx *ctx, const tp_jsd *p, tp_jsd_out *o) {
    const tp_jsd_spec *s = &p->s;
    size_t es = distil_dtype_size(p->d.dtype), lb = (p->nloss + 1) * sizeof(float);
    size_t xb = (size_t)(s->t * p->xs) * es, gb = (size_t)(s->t * p->gs) * es;
    void *dx = tu_upload(ctx, p->x, xb);
    void *dy = tu_upload(ctx, p->y, (size_t)(s->t * p->ys) * es);
    void *dl = tp_upload_opt(ctx, p->labels, (size_t)s->t * sizeof(int64_t));
    void *dloss = tu_alloc_poisoned(ctx, lb);
    void *dgrad = s->grad == TP_GRAD_OUT ? tu_alloc_poisoned(ctx, gb) : NULL;
    void *dn = tp_norm_upload(ctx, s->norm_device, s->normaliser);
    distil_jsd_desc d = p->d;
    d.normaliser_device = dn;
    TU_OK(ctx, distil_jsd(ctx, &d, dx, dy, dl, dloss, s->grad == TP_GRAD_INPLACE ? dx : dgrad));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    o->loss = tp_download_free(ctx, dloss, lb);
    o->grad = s->grad == TP_GRAD_INPLACE ? tp_download_free(ctx, dx, gb)
                                         : tp_download_free(ctx, dgrad, gb);
    if (s->grad != TP_GRAD_INPLACE) {
        distil_free(ctx, dx);
    }
    distil_free(ctx, dy);
    distil_free(ctx, dl);
    distil_free(ctx, dn);
}

void tp_jsd_out_free(tp_jsd_out *o) {
    free(o->loss), free(o->grad);
}

/* a and b hold the same bytes; both NULL (an output not asked for) is the same, one NULL is not. */
static void tp_check_same_buf(const char *what, const void *a, const void *b, size_t bytes) {
    if (a == NULL || b == NULL) {
        if (a != b) {
            print_error("%s: written by one run only\n", what);
            fail();
        }
        return;
    }
    TU_CHECK_BITWISE(what, a, b, bytes);
}

void tp_jsd_check_same(const tp_jsd *p, const tp_jsd_out *a, const tp_jsd_out *b) {
    size_t gb = (size_t)(p->s.t * p->gs) * distil_dtype_size(p->d.dtype);
    TU_CHECK_BITWISE("loss", a->loss, b->loss, (p->nloss + 1) * sizeof(float));
    tp_check_same_buf("grad_student", a->grad, b->grad, gb);
}

void tp_jsd_name(char *buf, size_t n, const tp_jsd_spec *s, distil_dtype dt) {
    static const char *const grads[] = {"out", "NULL", "in-place"};
    static const char *const reds[] = {"batchmean", "sum", "none"};
    char div[64] = "";
    if (s->div != DISTIL_DIVERGENCE_JSD || s->normaliser != 0.0f) {
        snprintf(div, sizeof div, " %s alpha=%g N=%g%s", tp_div_name(s->div), (double)s->alpha,
                 (double)s->normaliser, s->norm_device ? " (device)" : "");
    }
    snprintf(buf, n, "jsd %s T=%lld V=%lld beta=%g %s pad=%lld/%lld/%lld labels=%s grad=%s%s%s%s",
             distil_dtype_name(dt), (long long)s->t, (long long)s->v, (double)s->beta, reds[s->red],
             (long long)s->pad_x, (long long)s->pad_y, (long long)s->pad_g,
             tp_labels_names[s->labels], grads[s->grad], (s->special & TP_NEG_INF) ? " -inf" : "",
             (s->special & TP_TINY) ? " tiny" : "", div);
}

/* ---------------------------------------------------------------- fused */

unsigned tp_fused_grads(const tp_fused_spec *s) {
    return s->grads & (s->bias_s ? TP_WANT_ALL : TP_WANT_XS | TP_WANT_WS);
}

static void *tp_random_tensor(tu_rng *r, distil_dtype dt, size_t n, double std) {
    void *p = tp_xmalloc(n * distil_dtype_size(dt));
    tu_fill_normal(r, p, dt, n, std);
    return p;
}

void tp_fused_make(tp_fused *p, const tp_fused_spec *s, distil_dtype dt, uint64_t seed) {
    tu_rng r = tu_rng_make(seed);
    p->s = *s;
    distil_fused_linear_jsd_desc_init(&p->d);
    p->d.rows = s->t, p->d.vocab = s->v, p->d.student_hidden = s->hs;
    p->d.teacher_hidden = s->ht, p->d.dtype = dt, p->d.weight_hard = s->w_hard;
    p->d.weight_soft = s->w_soft, p->d.beta = s->beta, p->d.temperature = s->tau;
    p->d.return_parts = s->parts, p->d.chunk_rows = s->chunk;
    p->d.divergence = s->div, p->d.alpha = s->alpha != 0.0f ? s->alpha : p->d.alpha;
    p->d.normaliser = s->norm_device ? 0.0f : s->normaliser;
    p->d.temperature_squared = s->tau_sq;
    p->d.grad_weight_fp32 = s->gw_f32;
    const tp_head *hd = s->head;
    p->vt = hd == NULL || hd->vt == 0 ? s->v : hd->vt > 0 ? hd->vt : s->v + hd->vt;
    if (hd != NULL) {
        p->d.teacher_vocab = p->vt;
        p->d.student_logit_scale = hd->s_scale > 0 ? hd->s_scale : 1.0f;
        p->d.student_softcap = hd->s_cap;
        p->d.teacher_logit_scale = hd->t_scale > 0 ? hd->t_scale : 1.0f;
        p->d.teacher_softcap = hd->t_cap;
        p->d.teacher_temperature = hd->tau_t;
        p->d.teacher_head_precision =
            hd->t_fp8 ? DISTIL_HEAD_PRECISION_FP8_E4M3 : DISTIL_HEAD_PRECISION_DEFAULT;
    }
    double std = s->logit_std > 0 ? s->logit_std : 3.0; /* logits ~ N(0, std^2) */
    p->n_xs = (size_t)(s->t * s->hs), p->n_ws = (size_t)(s->v * s->hs);
    p->n_xt = (size_t)(s->t * s->ht), p->n_wt = (size_t)(p->vt * s->ht);
    p->xs = tp_random_tensor(&r, dt, p->n_xs, 1.0);
    p->ws = tp_random_tensor(&r, dt, p->n_ws, std / sqrt((double)s->hs));
    p->xt = tp_random_tensor(&r, dt, p->n_xt, 1.0);
    p->wt = tp_random_tensor(&r, dt, p->n_wt, std / sqrt((double)s->ht));
    p->bs = s->bias_s ? tp_random_tensor(&r, dt, (size_t)s->v, 0.5) : NULL;
    p->bt = s->bias_t ? tp_random_tensor(&r, dt, (size_t)p->vt, 0.5) : NULL;
    /* labels in the common prefix of the heads (docs/SPEC.md §6) */
    p->labels = tp_make_labels(&r, s->t, p->vt < s->v ? p->vt : s->v, s->labels, p->d.ignore_index);
}

void tp_fused_free(tp_fused *p) {
    free(p->xs), free(p->ws), free(p->bs), free(p->xt), free(p->wt), free(p->bt);
    free(p->labels);
}

void tp_fused_inputs(const tp_fused *p, const void *host[TP_FUSED_INPUTS],
                     size_t bytes[TP_FUSED_INPUTS]) {
    size_t es = distil_dtype_size(p->d.dtype);
    const void *h[TP_FUSED_INPUTS] = {p->xs, p->ws, p->bs, p->xt, p->wt, p->bt, p->labels};
    size_t b[TP_FUSED_INPUTS] = {p->n_xs * es,
                                 p->n_ws * es,
                                 (size_t)p->s.v * es,
                                 p->n_xt * es,
                                 p->n_wt * es,
                                 (size_t)p->vt * es,
                                 (size_t)p->s.t * sizeof(int64_t)};
    memcpy(host, h, sizeof h);
    memcpy(bytes, b, sizeof b);
}

void tp_fused_upload(distil_ctx *ctx, const tp_fused *p, void *in[TP_FUSED_INPUTS]) {
    const void *host[TP_FUSED_INPUTS];
    size_t bytes[TP_FUSED_INPUTS];
    tp_fused_inputs(p, host, bytes);
    for (size_t i = 0; i < TP_FUSED_INPUTS; i++) {
        in[i] = tp_upload_opt(ctx, host[i], bytes[i]);
    }
}

distil_dtype tp_fused_gw_dtype(const tp_fused *p) {
    return p->s.gw_f32 ? DISTIL_F32 : p->d.dtype;
}

void tp_fused_run(distil_ctx *ctx, const tp_fused *p, tp_fused_out *o) {
    const tp_fused_spec *s = &p->s;
    size_t es = distil_dtype_size(p->d.dtype), ges = distil_dtype_size(tp_fused_gw_dtype(p));
    size_t vb = (size_t)s->v * ges;
    void *in[TP_FUSED_INPUTS];
    tp_fused_upload(ctx, p, in);
    unsigned want = tp_fused_grads(s);
    void *dloss = tu_alloc_poisoned(ctx, sizeof o->loss);
    void *gxs = (want & TP_WANT_XS) ? tu_alloc_poisoned(ctx, p->n_xs * es) : NULL;
    void *gws = (want & TP_WANT_WS) ? tu_alloc_poisoned(ctx, p->n_ws * ges) : NULL;
    void *gbs = (want & TP_WANT_BS) ? tu_alloc_poisoned(ctx, vb) : NULL;
    void *dn = tp_norm_upload(ctx, s->norm_device, s->normaliser);
    distil_fused_linear_jsd_desc d = p->d;
    d.normaliser_device = dn;
    const bool lse = s->head != NULL && s->head->lse;
    size_t lb = (size_t)s->t * sizeof(float);
    d.student_lse = lse && lb > 0 ? tu_alloc_poisoned(ctx, lb) : NULL;
    d.teacher_lse = lse && lb > 0 ? tu_alloc_poisoned(ctx, lb) : NULL;
    const bool ent = s->head != NULL && s->head->entropy;
    d.student_entropy = ent && lb > 0 ? tu_alloc_poisoned(ctx, lb) : NULL;
    TU_OK(ctx, distil_fused_linear_jsd(ctx, &d, in[0], in[1], in[2], in[3], in[4], in[5], in[6],
                                       dloss, gxs, gws, gbs));
    TU_OK(ctx, distil_ctx_synchronize(ctx));
    tu_download(ctx, o->loss, dloss, sizeof o->loss);
    distil_free(ctx, dloss);
    o->gxs = tp_download_free(ctx, gxs, p->n_xs * es);
    o->gws = tp_download_free(ctx, gws, p->n_ws * ges);
    o->gbs = tp_download_free(ctx, gbs, vb);
    o->lse_s = tp_download_free(ctx, d.student_lse, lb);
    o->lse_t = tp_download_free(ctx, d.teacher_lse, lb);
    o->ent = tp_download_free(ctx, d.student_entropy, lb);
    for (size_t i = 0; i < TU_LEN(in); i++) {
        distil_free(ctx, in[i]);
    }
    distil_free(ctx, dn);
}

bool tp_fused_skip_unsupported(distil_ctx *ctx, const tp_fused *p) {
    size_t bytes = 0;
    const distil_status st = distil_fused_linear_jsd_workspace_size(ctx, &p->d, 1, &bytes);
    if (st == DISTIL_ERR_UNSUPPORTED) {
        print_message("skipped: %s\n", distil_ctx_last_error(ctx));
        return true;
    }
    TU_OK(ctx, st);
    return false;
}

void tp_fused_out_free(tp_fused_out *o) {
    free(o->gxs), free(o->gws), free(o->gbs), free(o->lse_s), free(o->lse_t), free(o->ent);
}

void tp_fused_check_same(const tp_fused *p, const tp_fused_out *a, const tp_fused_out *b) {
    size_t es = distil_dtype_size(p->d.dtype), lb = (size_t)p->s.t * sizeof(float);
    size_t ges = distil_dtype_size(tp_fused_gw_dtype(p));
    TU_CHECK_BITWISE("loss", a->loss, b->loss, sizeof a->loss);
    tp_check_same_buf("grad_student_hidden", a->gxs, b->gxs, p->n_xs * es);
    tp_check_same_buf("grad_student_weight", a->gws, b->gws, p->n_ws * ges);
    tp_check_same_buf("grad_student_bias", a->gbs, b->gbs, (size_t)p->s.v * ges);
    tp_check_same_buf("student_lse", a->lse_s, b->lse_s, lb); /* docs/SPEC.md §6 */
    tp_check_same_buf("teacher_lse", a->lse_t, b->lse_t, lb);
    tp_check_same_buf("student_entropy", a->ent, b->ent, lb);
}

void tp_fused_name(char *buf, size_t n, const tp_fused_spec *s, distil_dtype dt) {
    unsigned g = tp_fused_grads(s);
    snprintf(buf, n,
             "fused %s T=%lld V=%lld Hs=%lld Ht=%lld w=%g/%g beta=%g tau=%g bias=%s%s "
             "grads=%s%s%s%s labels=%s chunk=%lld%s%s %s alpha=%g N=%g%s%s",
             distil_dtype_name(dt), (long long)s->t, (long long)s->v, (long long)s->hs,
             (long long)s->ht, (double)s->w_hard, (double)s->w_soft, (double)s->beta,
             (double)s->tau, s->bias_s ? "s" : "-", s->bias_t ? "t" : "-", g ? "" : "none",
             (g & TP_WANT_XS) ? "xs" : "", (g & TP_WANT_WS) ? "Ws" : "",
             (g & TP_WANT_BS) ? "bs" : "", tp_labels_names[s->labels], (long long)s->chunk,
             s->parts ? " parts" : "", s->logit_std > 0 ? " extreme" : "", tp_div_name(s->div),
             (double)s->alpha, (double)s->normaliser, s->norm_device ? " (device)" : "",
             s->tau_sq ? " tau^2" : "");
    const tp_head *h = s->head;
    size_t used = strlen(buf);
    if (h != NULL && used < n) {
        snprintf(buf + used, n - used, " Vt=%lld s=%g/%g cap=%g/%g tau_t=%g%s%s%s",
                 (long long)h->vt, (double)h->s_scale, (double)h->t_scale, (double)h->s_cap,
                 (double)h->t_cap, (double)h->tau_t, h->lse ? " lse" : "", h->t_fp8 ? " fp8" : "",
                 h->entropy ? " entropy" : "");
    }
    used = strlen(buf);
    used = strlen(buf);
    if (s->gw_f32 && used < n) {
        snprintf(buf + used, n - used, " gw_f32");
    }
    used = strlen(buf);
    if (s->tag != NULL && used < n) {
        snprintf(buf + used, n - used, " #%s", s->tag);
    }
}
