/*
 * test_bad_input.c - docs/SPEC.md §5 for both losses: every invalid argument is refused with
 * DISTIL_ERR_INVALID_ARG (or the documented code) and a message naming it, and no output is
 * touched (outputs are poisoned before and compared bitwise after). T == 0 writes only the loss.
 * An out-of-range label in the fused loss is reported (call or next synchronize) with its row,
 * and the row is treated exactly like an ignored one.
 */
#include "test_problems.h" /* tp_div_count */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 4, V = 8, PAD = 4, LD = V + PAD, HS = 3, HT = 5 };

static const char *g_backend;
static distil_ctx *g_ctx;

/* Device buffers shared by every case; inputs hold valid data, outputs are re-poisoned. */
static struct {
    void *x, *y, *labels, *loss, *grad;                            /* distil_jsd: (T, LD) f32 */
    void *xs, *ws, *bs, *xt, *wt, *bt, *flabels, *gxs, *gws, *gbs; /* fused, f32 */
    void *nd; /* a device normaliser (docs/SPEC.md §6), one f32 */
} g;

enum { LOSS_FLOATS = T + 1, GRAD_BYTES = T * LD * 4 };

static int group_setup(void **state) {
    (void)state;
    if (distil_ctx_create(&g_ctx, g_backend, 0) != DISTIL_OK) {
        return -1;
    }
    tu_rng r = tu_rng_make(5);
    float x[T * LD], y[T * LD], xs[T * HS], ws[V * HS], bs[V], xt[T * HT], wt[V * HT], bt[V];
    memset(x, 0, sizeof x); /* the padding columns past V are uploaded (and compared) too */
    memset(y, 0, sizeof y);
    tu_fill_logp(&r, x, DISTIL_F32, T, V, LD, 2.0, NULL);
    tu_fill_logp(&r, y, DISTIL_F32, T, V, LD, 2.0, NULL);
    tu_fill_normal(&r, xs, DISTIL_F32, TU_LEN(xs), 1.0);
    tu_fill_normal(&r, ws, DISTIL_F32, TU_LEN(ws), 0.5);
    tu_fill_normal(&r, bs, DISTIL_F32, TU_LEN(bs), 0.5);
    tu_fill_normal(&r, xt, DISTIL_F32, TU_LEN(xt), 1.0);
    tu_fill_normal(&r, wt, DISTIL_F32, TU_LEN(wt), 0.5);
    tu_fill_normal(&r, bt, DISTIL_F32, TU_LEN(bt), 0.5);
    int64_t labels[T] = {1, -100, 7, 0};
    g.x = tu_upload(g_ctx, x, sizeof x), g.y = tu_upload(g_ctx, y, sizeof y);
    g.labels = tu_upload(g_ctx, labels, sizeof labels);
    g.loss = tu_alloc_poisoned(g_ctx, LOSS_FLOATS * 4);
    g.grad = tu_alloc_poisoned(g_ctx, GRAD_BYTES);
    g.xs = tu_upload(g_ctx, xs, sizeof xs), g.ws = tu_upload(g_ctx, ws, sizeof ws);
    g.bs = tu_upload(g_ctx, bs, sizeof bs), g.xt = tu_upload(g_ctx, xt, sizeof xt);
    g.wt = tu_upload(g_ctx, wt, sizeof wt), g.bt = tu_upload(g_ctx, bt, sizeof bt);
    g.flabels = tu_upload(g_ctx, labels, sizeof labels);
    g.gxs = tu_alloc_poisoned(g_ctx, sizeof xs);
    g.gws = tu_alloc_poisoned(g_ctx, sizeof ws);
    g.gbs = tu_alloc_poisoned(g_ctx, sizeof bs);
    const float n = 4.0f;
    g.nd = tu_upload(g_ctx, &n, sizeof n);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    void **all = (void **)&g;
    for (size_t i = 0; i < sizeof g / sizeof(void *); i++) {
        distil_free(g_ctx, all[i]);
        all[i] = NULL;
    }
    distil_ctx_destroy(g_ctx);
    return 0;
}

/* ---------------------------------------------------------------- output snapshots */

/* Every output buffer (and the inputs an aliasing grad could hit), downloaded. */
typedef struct outputs {
    float loss[LOSS_FLOATS];
    unsigned char grad[GRAD_BYTES], y[GRAD_BYTES];
    float gxs[T * HS], gws[V * HS], gbs[V];
} outputs;

static void poison_outputs(void) {
    outputs o;
    tu_poison(&o, sizeof o);
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.loss, o.loss, sizeof o.loss));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.grad, o.grad, sizeof o.grad));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.gxs, o.gxs, sizeof o.gxs));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.gws, o.gws, sizeof o.gws));
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.gbs, o.gbs, sizeof o.gbs));
}

static void snapshot(outputs *o) {
    memset(o, 0, sizeof *o);
    tu_download(g_ctx, o->loss, g.loss, sizeof o->loss);
    tu_download(g_ctx, o->grad, g.grad, sizeof o->grad);
    tu_download(g_ctx, o->y, g.y, sizeof o->y);
    tu_download(g_ctx, o->gxs, g.gxs, sizeof o->gxs);
    tu_download(g_ctx, o->gws, g.gws, sizeof o->gws);
    tu_download(g_ctx, o->gbs, g.gbs, sizeof o->gbs);
}

/* ---------------------------------------------------------------- distil_jsd */

typedef struct jsd_call {
    distil_ctx *ctx;
    distil_jsd_desc d;
    bool null_desc;
    const void *x, *y;
    const int64_t *labels;
    float *loss;
    void *grad;
} jsd_call;

static jsd_call jsd_valid(void) {
    jsd_call c = {
        .ctx = g_ctx, .x = g.x, .y = g.y, .labels = g.labels, .loss = g.loss, .grad = g.grad};
    distil_jsd_desc_init(&c.d);
    c.d.rows = T, c.d.vocab = V, c.d.student_stride = LD, c.d.teacher_stride = LD;
    c.d.grad_stride = LD, c.d.beta = 0.5f;
    return c;
}

static distil_status jsd_run(const jsd_call *c) {
    return distil_jsd(c->ctx, c->null_desc ? NULL : &c->d, c->x, c->y, c->labels, c->loss, c->grad);
}

/* The call is refused with `want`, names one of `names`, and writes nothing. */
static void jsd_refused(jsd_call c, distil_status want, const char *names) {
    outputs before, after;
    poison_outputs();
    snapshot(&before);
    TU_EXPECT(c.ctx, want, jsd_run(&c));
    TU_CHECK_MESSAGE(c.ctx, names);
    snapshot(&after);
    TU_CHECK_BITWISE("outputs of a refused distil_jsd", &after, &before, sizeof after);
}

/* A descriptor rule: the call and the workspace query are both refused. */
static void jsd_desc_refused(jsd_call c, distil_status want, const char *names) {
    jsd_refused(c, want, names);
    size_t bytes = 0;
    TU_EXPECT(c.ctx, want, distil_jsd_workspace_size(c.ctx, &c.d, &bytes));
    TU_CHECK_MESSAGE(c.ctx, names);
}

static void test_jsd_null(void **state) {
    (void)state;
    jsd_call c = jsd_valid();
    c.ctx = NULL;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "ctx");
    c = jsd_valid(), c.null_desc = true;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "desc");
    c = jsd_valid(), c.x = NULL;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "student_logp");
    c = jsd_valid(), c.y = NULL;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_logp");
    c = jsd_valid(), c.loss = NULL;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "loss");
}

static void test_jsd_shapes(void **state) {
    (void)state;
    jsd_call c = jsd_valid();
    c.d.rows = -1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "rows");
    c = jsd_valid(), c.d.vocab = 0;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "vocab");
    c = jsd_valid(), c.d.vocab = -3;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "vocab");
    c = jsd_valid(), c.d.student_stride = V - 1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "student_stride|student_logp");
    c = jsd_valid(), c.d.student_stride = -1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "student_stride|student_logp");
    c = jsd_valid(), c.d.teacher_stride = V - 1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_stride|teacher_logp");
    c = jsd_valid(), c.d.grad_stride = 1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "grad_stride|grad_student");
}

static void test_jsd_values(void **state) {
    (void)state;
    const float bad_beta[] = {-0.01f, 1.01f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < TU_LEN(bad_beta); i++) {
        jsd_call c = jsd_valid();
        c.d.beta = bad_beta[i];
        jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "beta");
    }
    jsd_call c = jsd_valid();
    c.d.dtype = (distil_dtype)7;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "dtype");
    c = jsd_valid(), c.d.dtype = (distil_dtype)-1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "dtype");
    c = jsd_valid(), c.d.reduction = (distil_reduction)9;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "reduction");
    c = jsd_valid(), c.d.reduction = (distil_reduction)-1;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "reduction");
}

static void test_jsd_aliasing(void **state) {
    (void)state;
    jsd_call c = jsd_valid();
    c.grad = g.y; /* the gradient would overwrite the teacher */
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "grad_student");
    c = jsd_valid(), c.grad = (void *)c.x; /* in place with a different stride */
    c.d.grad_stride = LD + 1;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "grad_student|grad_stride");
}

/* rows == 0: one loss value 0 for a scalar reduction, nothing else written. */
static void test_jsd_zero_rows(void **state) {
    (void)state;
    const distil_reduction reds[] = {DISTIL_REDUCTION_BATCHMEAN, DISTIL_REDUCTION_SUM,
                                     DISTIL_REDUCTION_NONE};
    for (size_t i = 0; i < TU_LEN(reds); i++) {
        jsd_call c = jsd_valid();
        c.d.rows = 0, c.d.reduction = reds[i];
        outputs before, after;
        poison_outputs();
        snapshot(&before);
        TU_OK(g_ctx, jsd_run(&c));
        TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
        snapshot(&after);
        if (reds[i] != DISTIL_REDUCTION_NONE) {
            assert_true(after.loss[0] == 0.0f);
            after.loss[0] = before.loss[0];
        }
        /* NONE has (rows) = 0 loss values: writing one would overrun the caller's buffer. */
        TU_CHECK_BITWISE("outputs other than the loss at rows == 0", &after, &before, sizeof after);
    }
}

/* ---------------------------------------------------------------- distil_fused_linear_jsd */

typedef struct fused_call {
    distil_ctx *ctx;
    distil_fused_linear_jsd_desc d;
    bool null_desc;
    const void *xs, *ws, *bs, *xt, *wt, *bt;
    const int64_t *labels;
    float *loss;
    void *gxs, *gws, *gbs;
} fused_call;

static fused_call fused_valid(void) {
    fused_call c = {.ctx = g_ctx,
                    .xs = g.xs,
                    .ws = g.ws,
                    .bs = g.bs,
                    .xt = g.xt,
                    .wt = g.wt,
                    .bt = g.bt,
                    .labels = g.flabels,
                    .loss = g.loss,
                    .gxs = g.gxs,
                    .gws = g.gws,
                    .gbs = g.gbs};
    distil_fused_linear_jsd_desc_init(&c.d);
    c.d.rows = T, c.d.vocab = V, c.d.student_hidden = HS, c.d.teacher_hidden = HT;
    c.d.dtype = DISTIL_F32, c.d.return_parts = 1;
    return c;
}

static distil_status fused_run(const fused_call *c) {
    return distil_fused_linear_jsd(c->ctx, c->null_desc ? NULL : &c->d, c->xs, c->ws, c->bs, c->xt,
                                   c->wt, c->bt, c->labels, c->loss, c->gxs, c->gws, c->gbs);
}

static void fused_refused(fused_call c, distil_status want, const char *names) {
    outputs before, after;
    poison_outputs();
    snapshot(&before);
    TU_EXPECT(c.ctx, want, fused_run(&c));
    TU_CHECK_MESSAGE(c.ctx, names);
    snapshot(&after);
    TU_CHECK_BITWISE("outputs of a refused distil_fused_linear_jsd", &after, &before, sizeof after);
}

/* A descriptor rule: the call and the workspace query are both refused. */
static void fused_desc_refused(fused_call c, distil_status want, const char *names) {
    fused_refused(c, want, names);
    size_t bytes = 0;
    TU_EXPECT(c.ctx, want, distil_fused_linear_jsd_workspace_size(c.ctx, &c.d, 1, &bytes));
    TU_CHECK_MESSAGE(c.ctx, names);
}

static void test_fused_null(void **state) {
    (void)state;
    fused_call c = fused_valid();
    c.ctx = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "ctx");
    c = fused_valid(), c.null_desc = true;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "desc");
    c = fused_valid(), c.xs = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "student_hidden");
    c = fused_valid(), c.ws = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "student_weight");
    c = fused_valid(), c.xt = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_hidden");
    c = fused_valid(), c.wt = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_weight");
    c = fused_valid(), c.labels = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "labels");
    c = fused_valid(), c.loss = NULL;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "loss");
    c = fused_valid(), c.bs = NULL; /* grad_student_bias without student_bias */
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "grad_student_bias");
}

static void test_fused_shapes(void **state) {
    (void)state;
    fused_call c = fused_valid();
    c.d.rows = -1;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "rows");
    c = fused_valid(), c.d.vocab = 0;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "vocab");
    c = fused_valid(), c.d.student_hidden = 0;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "student_hidden");
    c = fused_valid(), c.d.teacher_hidden = -2;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_hidden");
    c = fused_valid(), c.d.student_weight_hidden = HS + 1;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "student_weight_hidden|student_weight");
    c = fused_valid(), c.d.teacher_weight_hidden = HT - 1;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_weight_hidden|teacher_weight");
    c = fused_valid(), c.d.teacher_vocab = -1;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_vocab");
    c = fused_valid(), c.d.chunk_rows = -1;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "chunk_rows");
    c = fused_valid(), c.d.dtype = (distil_dtype)3;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "dtype");
}

static void test_fused_values(void **state) {
    (void)state;
    const float bad_weight[] = {-1.0f, -0.0001f, NAN, INFINITY};
    for (size_t i = 0; i < TU_LEN(bad_weight); i++) {
        fused_call c = fused_valid();
        c.d.weight_hard = bad_weight[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "weight_hard");
        c = fused_valid(), c.d.weight_soft = bad_weight[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "weight_soft");
    }
    fused_call c = fused_valid();
    c.d.weight_hard = 0.0f, c.d.weight_soft = 0.0f;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "weight_hard|weight_soft");
    const float bad_beta[] = {-0.5f, 1.5f, NAN};
    for (size_t i = 0; i < TU_LEN(bad_beta); i++) {
        c = fused_valid(), c.d.beta = bad_beta[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "beta");
    }
    const float bad_tau[] = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < TU_LEN(bad_tau); i++) {
        c = fused_valid(), c.d.temperature = bad_tau[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "temperature");
    }
}

/* docs/SPEC.md §6 head options: each value rule, and the LSE outputs' pointer rules. */
static void test_fused_head_values(void **state) {
    (void)state;
    const float bad_scale[] = {0.0f, -0.0f, -1.0f, INFINITY, NAN};
    for (size_t i = 0; i < TU_LEN(bad_scale); i++) {
        fused_call c = fused_valid();
        c.d.student_logit_scale = bad_scale[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "student_logit_scale");
        c = fused_valid(), c.d.teacher_logit_scale = bad_scale[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_logit_scale");
    }
    const float bad_cap[] = {-1.0f, -0.001f, INFINITY, NAN, 1e-45f};
    for (size_t i = 0; i < TU_LEN(bad_cap); i++) {
        fused_call c = fused_valid();
        c.d.student_softcap = bad_cap[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "student_softcap");
        c = fused_valid(), c.d.teacher_softcap = bad_cap[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_softcap");
    }
    const float bad_tau[] = {-1.0f, INFINITY, NAN, 1e-45f}; /* -0 is 0: the default */
    for (size_t i = 0; i < TU_LEN(bad_tau); i++) {
        fused_call c = fused_valid();
        c.d.teacher_temperature = bad_tau[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_temperature");
    }
    /* an LSE output over an input, over the loss, over the other LSE */
    fused_call c = fused_valid();
    c.d.student_lse = g.xs;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "student_lse");
    c = fused_valid(), c.d.teacher_lse = (float *)c.loss;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_lse");
    c = fused_valid(), c.d.student_lse = g.gxs, c.d.teacher_lse = g.gxs;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "student_lse");
    /* the student's entropy (docs/SPEC.md §6) over an input, over the loss */
    c = fused_valid(), c.d.student_entropy = g.xs;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "student_entropy");
    c = fused_valid(), c.d.student_entropy = (float *)c.loss;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "student_entropy");
}

/* Vocabularies of different sizes (docs/SPEC.md §6): a label beyond the common prefix is an
 * invalid label, reported as for any other. */
static void test_fused_head_labels(void **state) {
    (void)state;
    int64_t lab[T] = {1, -100, V - 1, 0}; /* V - 1 is outside the teacher's V - 1 rows */
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.flabels, lab, sizeof lab));
    poison_outputs();
    fused_call c = fused_valid();
    c.d.teacher_vocab = V - 1;
    distil_status call = fused_run(&c);
    distil_status sync = distil_ctx_synchronize(g_ctx);
    assert_true((call == DISTIL_ERR_INVALID_LABEL && sync == DISTIL_OK) ||
                (call == DISTIL_OK && sync == DISTIL_ERR_INVALID_LABEL));
    TU_CHECK_MESSAGE(g_ctx, "row 2");
    int64_t ok[T] = {1, -100, 7, 0};
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.flabels, ok, sizeof ok));
}

/* rows == 0: the loss (and its parts) is 0, nothing else is written; row pointers may be NULL. */
static void test_fused_zero_rows(void **state) {
    (void)state;
    fused_call c = fused_valid();
    c.d.rows = 0, c.xs = NULL, c.xt = NULL, c.labels = NULL;
    outputs before, after;
    poison_outputs();
    snapshot(&before);
    TU_OK(g_ctx, fused_run(&c));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    snapshot(&after);
    for (int i = 0; i < 3; i++) {
        assert_true(after.loss[i] == 0.0f);
        after.loss[i] = before.loss[i];
    }
    TU_CHECK_BITWISE("outputs other than the loss at rows == 0", &after, &before, sizeof after);
}

/* Run the fused call on labels `lab`, returning the status of the call or, when the call was
 * accepted, of the following synchronize (a deferred label error). */
static distil_status fused_with_labels(const int64_t lab[T], outputs *o, distil_status *call,
                                       distil_status *sync) {
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.flabels, lab, T * sizeof(int64_t)));
    poison_outputs();
    fused_call c = fused_valid();
    *call = fused_run(&c);
    *sync = distil_ctx_synchronize(g_ctx);
    snapshot(o);
    return *call != DISTIL_OK ? *call : *sync;
}

static void expect_invalid_label(int64_t bad_row, int64_t bad_label, int64_t also_bad_row) {
    int64_t lab[T] = {1, 6, 7, 0};
    int64_t ignored[T] = {1, 6, 7, 0};
    lab[bad_row] = bad_label, ignored[bad_row] = -100;
    if (also_bad_row >= 0) {
        lab[also_bad_row] = V, ignored[also_bad_row] = -100;
    }
    outputs got, want;
    distil_status call, sync;
    TU_EXPECT(g_ctx, DISTIL_ERR_INVALID_LABEL, fused_with_labels(lab, &got, &call, &sync));
    /* Reported once: by the call (host backends) or by the synchronize after it. */
    assert_true((call == DISTIL_ERR_INVALID_LABEL && sync == DISTIL_OK) ||
                (call == DISTIL_OK && sync == DISTIL_ERR_INVALID_LABEL));
    char row[32];
    snprintf(row, sizeof row, "row %lld", (long long)bad_row);
    TU_CHECK_MESSAGE(g_ctx, row);
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
    TU_OK(g_ctx, fused_with_labels(ignored, &want, &call, &sync));
    TU_CHECK_BITWISE("outputs with a bad label vs the same row ignored", &got, &want, sizeof got);
}

static void test_fused_invalid_label(void **state) {
    (void)state;
    expect_invalid_label(2, V, -1);
    expect_invalid_label(0, -5, -1);
    expect_invalid_label(1, 1000000, 3); /* the first bad row is the one reported */
    int64_t ok[T] = {1, -100, 7, 0};
    TU_OK(g_ctx, distil_memcpy_to_device(g_ctx, g.flabels, ok, sizeof ok));
}

/* Host memory given to a backend whose memory is not the host's (docs/SPEC.md §5: "a device
 * pointer of the wrong backend where the backend can tell"); cpu and ref cannot tell. */
static void test_foreign_memory(void **state) {
    (void)state;
    if (strcmp(g_backend, "cpu") == 0 || strcmp(g_backend, "ref") == 0) {
        print_message("%s: device memory is host memory, nothing to tell apart\n", g_backend);
        skip();
    }
    static float host[T * LD * 4];
    jsd_call c = jsd_valid();
    c.y = host;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_logp");
    c = jsd_valid(), c.grad = host;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "grad_student");
    fused_call f = fused_valid();
    f.ws = host;
    fused_refused(f, DISTIL_ERR_INVALID_ARG, "student_weight");
    f = fused_valid(), f.gxs = host;
    fused_refused(f, DISTIL_ERR_INVALID_ARG, "grad_student_hidden");
}

/* docs/SPEC.md §6: divergence, alpha and the given normaliser, on both losses. */
static const float bad_alpha[] = {-0.01f, 1.01f, NAN, INFINITY};
/* The values around the library's divergences: -1, the first past the last, and far past. */
static distil_divergence bad_div_at(size_t i) {
    const int past = tp_div_count();
    const int bad[] = {-1, past, 100 + past};
    return (distil_divergence)bad[i];
}
enum { N_BAD_DIV = 3 };
static const float bad_norm[] = {-1.0f, NAN, INFINITY, -INFINITY, 1e-45f};

static void test_jsd_divergence(void **state) {
    (void)state;
    for (size_t i = 0; i < TU_LEN(bad_alpha); i++) {
        jsd_call c = jsd_valid();
        c.d.divergence = DISTIL_DIVERGENCE_SKEW_KL, c.d.alpha = bad_alpha[i];
        jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "alpha");
    }
    for (size_t i = 0; i < N_BAD_DIV; i++) {
        jsd_call c = jsd_valid();
        c.d.divergence = bad_div_at(i);
        jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "divergence");
    }
    for (size_t i = 0; i < TU_LEN(bad_norm); i++) {
        jsd_call c = jsd_valid();
        c.d.normaliser = bad_norm[i];
        jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser");
    }
    jsd_call c = jsd_valid();
    c.d.normaliser = 4.0f, c.d.normaliser_device = (const float *)g.nd;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser");
    TU_CHECK_MESSAGE(c.ctx, "normaliser_device");
    c = jsd_valid(), c.d.normaliser = 4.0f, c.d.reduction = DISTIL_REDUCTION_SUM;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser");
    c = jsd_valid(), c.d.normaliser_device = (const float *)g.nd;
    c.d.reduction = DISTIL_REDUCTION_NONE;
    jsd_desc_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser");
    /* the device normaliser is an input: an output over it is refused */
    c = jsd_valid(), c.d.normaliser_device = (const float *)g.loss;
    jsd_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser_device");
}

static void test_fused_divergence(void **state) {
    (void)state;
    for (size_t i = 0; i < TU_LEN(bad_alpha); i++) {
        fused_call c = fused_valid();
        c.d.divergence = DISTIL_DIVERGENCE_SKEW_REVERSE_KL, c.d.alpha = bad_alpha[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "alpha");
    }
    for (size_t i = 0; i < N_BAD_DIV; i++) {
        fused_call c = fused_valid();
        c.d.divergence = bad_div_at(i);
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "divergence");
    }
    for (size_t i = 0; i < TU_LEN(bad_norm); i++) {
        fused_call c = fused_valid();
        c.d.normaliser = bad_norm[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser");
    }
    fused_call c = fused_valid();
    c.d.normaliser = 4.0f, c.d.normaliser_device = (const float *)g.nd;
    fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser");
    TU_CHECK_MESSAGE(c.ctx, "normaliser_device");
    c = fused_valid(), c.d.normaliser_device = (const float *)g.loss;
    fused_refused(c, DISTIL_ERR_INVALID_ARG, "normaliser_device");
}

/* docs/SPEC.md §6 fp8 teacher head: an unknown teacher_head_precision is refused; a backend
 * without the fp8 head (its table's capability) refuses it as UNSUPPORTED, naming the option, and
 * writes nothing. */
static void test_fused_fp8(void **state) {
    (void)state;
    const int bad[] = {-1, 2, 77};
    for (size_t i = 0; i < TU_LEN(bad); i++) {
        fused_call c = fused_valid();
        c.d.teacher_head_precision = (distil_head_precision)bad[i];
        fused_desc_refused(c, DISTIL_ERR_INVALID_ARG, "teacher_head_precision");
    }
    fused_call c = fused_valid();
    c.d.teacher_head_precision = DISTIL_HEAD_PRECISION_FP8_E4M3;
    const bool has_fp8 = distil_testing_capabilities(g_ctx).fp8_head;
    if (!has_fp8) {
        fused_desc_refused(c, DISTIL_ERR_UNSUPPORTED, "teacher_head_precision");
        return;
    }
    poison_outputs();
    TU_OK(g_ctx, fused_run(&c));
    TU_OK(g_ctx, distil_ctx_synchronize(g_ctx));
}

static int run_group(const char *backend) {
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsd_null),          cmocka_unit_test(test_jsd_shapes),
        cmocka_unit_test(test_jsd_values),        cmocka_unit_test(test_jsd_aliasing),
        cmocka_unit_test(test_jsd_zero_rows),     cmocka_unit_test(test_fused_null),
        cmocka_unit_test(test_fused_shapes),      cmocka_unit_test(test_fused_values),
        cmocka_unit_test(test_fused_zero_rows),   cmocka_unit_test(test_fused_invalid_label),
        cmocka_unit_test(test_foreign_memory),    cmocka_unit_test(test_jsd_divergence),
        cmocka_unit_test(test_fused_divergence),  cmocka_unit_test(test_fused_head_values),
        cmocka_unit_test(test_fused_head_labels), cmocka_unit_test(test_fused_fp8),
    };
    g_backend = backend;
    return cmocka_run_group_tests_name(tu_group_name("bad_input", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, true);
}
