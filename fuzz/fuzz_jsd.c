/*
 * fuzz_jsd.c - distil_jsd and distil_jsd_workspace_size under fuzzed descriptors, pointers,
 * aliasing, labels, special values, lent workspaces and allocation faults. The expected status
 * is derived from the rules of distil.h / docs/SPEC.md §5 independently of the library.
 */
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FZ_GRAD_NONE, FZ_GRAD_OWN, FZ_GRAD_IN_PLACE, FZ_GRAD_TEACHER, FZ_GRAD_LOSS };

typedef struct fz_jsd {
    distil_jsd_desc d;
    bool desc_null, x_null, y_null, labels_on, loss_null;
    int grad_mode;
    size_t lend; /* bytes of a lent workspace, 0: none */
    long fault;
    bool backed, huge, special; /* huge: a field past the caps (may be "too large") */
    int64_t xs, ys, gs;         /* strides as buffers are laid out: max(stride, vocab) */
    size_t es;
    fz_buf x, y, labels, loss, grad, work;
} fz_jsd;

static int64_t fz_max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static void fz_jsd_read_desc(fz_in *in, distil_jsd_desc *d) {
    distil_jsd_desc_init(d);
    if (fz_byte(in) >= 240) {
        d->struct_size = (size_t)fz_i64_field(in, 0, 0, (int64_t)sizeof *d + 16);
    }
    d->rows = fz_i64_field(in, 3, 0, FZ_MAX_ROWS);
    d->vocab = fz_i64_field(in, 16, 1, fz_vocab_cap(in));
    const int64_t stride_hi = fz_stride_cap(d->vocab);
    d->student_stride = fz_i64_field(in, 0, 0, stride_hi);
    d->teacher_stride = fz_i64_field(in, 0, 0, stride_hi);
    d->grad_stride = fz_i64_field(in, 0, 0, stride_hi);
    d->dtype = (distil_dtype)fz_i64_field(in, fz_pick(in, 3), 0, 3);
    d->beta = fz_float_field(in, 0.5f, 0.0f, 1.0f);
    d->ignore_index = fz_i64_field(in, -100, -100, FZ_NARROW_VOCAB);
    d->reduction = (distil_reduction)fz_i64_field(in, fz_pick(in, 3), 0, 3);
    d->grad_scale = fz_float_field(in, 1.0f, -4.0f, 4.0f);
    fz_read_divergence(in, &d->divergence, &d->alpha, &d->normaliser);
}

static void fz_jsd_read(fz_in *in, fz_jsd *c) {
    memset(c, 0, sizeof *c);
    fz_jsd_read_desc(in, &c->d);
    unsigned ptr_bits = fz_byte(in) >= 224 ? fz_byte(in) : 0;
    c->desc_null = ptr_bits & 1;
    c->x_null = ptr_bits & 2;
    c->y_null = ptr_bits & 4;
    c->loss_null = ptr_bits & 8;
    c->labels_on = fz_pick(in, 3) != 0;
    c->grad_mode = (int)fz_pick(in, 5);
    c->lend = fz_byte(in) >= 224 ? fz_u32(in) % 8192 : 0;
    c->fault = fz_fault_countdown(in);
    const distil_jsd_desc *d = &c->d;
    int64_t width = fz_max64(d->vocab, 1);
    c->xs = fz_max64(d->student_stride, width);
    c->ys = fz_max64(d->teacher_stride, width);
    c->gs = c->grad_mode == FZ_GRAD_IN_PLACE ? c->xs : fz_max64(d->grad_stride, width);
    c->huge = d->rows > FZ_MAX_ROWS || d->vocab > FZ_MAX_VOCAB ||
              d->student_stride > FZ_MAX_STRIDE || d->teacher_stride > FZ_MAX_STRIDE ||
              d->grad_stride > FZ_MAX_STRIDE;
    c->backed = d->rows >= 0 && d->rows <= FZ_MAX_ROWS && d->vocab <= FZ_MAX_VOCAB &&
                c->xs <= FZ_MAX_STRIDE && c->ys <= FZ_MAX_STRIDE && c->gs <= FZ_MAX_STRIDE;
    size_t es = distil_dtype_size(d->dtype);
    c->es = es ? es : 4;
}

/* The status the contract prescribes for the call (before any allocation fault). */
static distil_status fz_jsd_expect(const fz_jsd *c, bool with_data) {
    const distil_jsd_desc *d = &c->d;
    if (c->desc_null) {
        return DISTIL_ERR_INVALID_ARG;
    }
    if (d->struct_size != sizeof *d) {
        return DISTIL_ERR_VERSION;
    }
    bool bad = distil_dtype_size(d->dtype) == 0 || (unsigned)d->reduction > 2u || d->rows < 0 ||
               d->vocab < 1 || (d->student_stride != 0 && d->student_stride < d->vocab) ||
               (d->teacher_stride != 0 && d->teacher_stride < d->vocab) ||
               (d->grad_stride != 0 && d->grad_stride < d->vocab) ||
               !(d->beta >= 0.0f && d->beta <= 1.0f) || !isfinite(d->grad_scale) ||
               fz_bad_divergence(d->divergence, d->alpha, d->normaliser) ||
               (d->normaliser != 0.0f && d->reduction != DISTIL_REDUCTION_BATCHMEAN);
    if (bad) {
        return DISTIL_ERR_INVALID_ARG;
    }
    if (!with_data) {
        return DISTIL_OK;
    }
    bool loss_needed = d->rows > 0 || d->reduction != DISTIL_REDUCTION_NONE;
    if ((c->loss_null && loss_needed) || (d->rows > 0 && (c->x_null || c->y_null))) {
        return DISTIL_ERR_INVALID_ARG;
    }
    /* Aliasing needs a pointer: with rows == 0 the buffers are empty and passed as NULL. */
    if (c->grad_mode == FZ_GRAD_TEACHER && !c->y_null && d->rows > 0) {
        return DISTIL_ERR_INVALID_ARG;
    }
    if (c->grad_mode == FZ_GRAD_LOSS && !c->loss_null && d->rows > 0) {
        return DISTIL_ERR_INVALID_ARG; /* the gradient over the loss: an overlap */
    }
    int64_t xs = d->student_stride ? d->student_stride : d->vocab;
    int64_t gs = d->grad_stride ? d->grad_stride : d->vocab;
    if (c->grad_mode == FZ_GRAD_IN_PLACE && !c->x_null && d->rows > 0 && xs != gs) {
        return DISTIL_ERR_INVALID_ARG;
    }
    return DISTIL_OK;
}

static bool fz_jsd_alloc(distil_ctx *ctx, fz_jsd *c) {
    size_t rows = (size_t)c->d.rows;
    size_t loss_n = c->d.reduction == DISTIL_REDUCTION_NONE ? rows : 1;
    bool ok = fz_buf_alloc(ctx, &c->x, rows * (size_t)c->xs * c->es) &&
              fz_buf_alloc(ctx, &c->y, rows * (size_t)c->ys * c->es) &&
              fz_buf_alloc(ctx, &c->labels, c->labels_on ? rows * sizeof(int64_t) : 0) &&
              fz_buf_alloc(ctx, &c->loss, (loss_n ? loss_n : 1) * sizeof(float)) &&
              fz_buf_alloc(ctx, &c->grad,
                           c->grad_mode == FZ_GRAD_OWN ? rows * (size_t)c->gs * c->es : 0) &&
              fz_buf_alloc(ctx, &c->work, c->lend);
    return ok;
}

static void fz_jsd_fill(fz_in *in, distil_ctx *ctx, fz_jsd *c) {
    c->special = fz_fill_data(in, c->x.host, c->d.dtype, c->x.bytes / c->es, true);
    c->special |= fz_fill_data(in, c->y.host, c->d.dtype, c->y.bytes / c->es, true);
    int64_t *l = c->labels.host;
    for (size_t i = 0; i < c->labels.bytes / sizeof(int64_t); i++) {
        unsigned m = fz_pick(in, 4);
        l[i] = m == 0 ? c->d.ignore_index : m == 3 ? (int64_t)fz_u64(in) : (int64_t)fz_pick(in, 64);
    }
    fz_buf_poison(&c->loss);
    fz_buf_poison(&c->grad);
    fz_buf_upload(ctx, &c->x);
    fz_buf_upload(ctx, &c->y);
    fz_buf_upload(ctx, &c->labels);
    fz_buf_upload(ctx, &c->loss);
    fz_buf_upload(ctx, &c->grad);
}

static distil_status fz_jsd_call(distil_ctx *ctx, fz_jsd *c) {
    void *grad = c->grad_mode == FZ_GRAD_OWN        ? c->grad.dev
                 : c->grad_mode == FZ_GRAD_IN_PLACE ? (c->x_null ? NULL : c->x.dev)
                 : c->grad_mode == FZ_GRAD_TEACHER  ? (c->y_null ? NULL : c->y.dev)
                 : c->grad_mode == FZ_GRAD_LOSS     ? (c->loss_null ? NULL : c->loss.dev)
                                                    : NULL;
    if (c->lend > 0) {
        distil_status s = distil_ctx_set_workspace(ctx, c->work.dev, c->work.bytes);
        fz_check_status(ctx, "ctx_set_workspace", s, FZ_S(DISTIL_OK));
    }
    fz_mark_message(ctx);
    distil_testing_fail_allocations(c->fault);
    distil_status s = distil_jsd(ctx, c->desc_null ? NULL : &c->d, c->x_null ? NULL : c->x.dev,
                                 c->y_null ? NULL : c->y.dev, c->labels.dev,
                                 c->loss_null ? NULL : c->loss.dev, grad);
    distil_testing_fail_allocations(-1);
    if (c->lend > 0) {
        distil_status u = distil_ctx_set_workspace(ctx, NULL, 0);
        fz_check_status(ctx, "ctx_set_workspace(NULL)", u, FZ_S(DISTIL_OK));
    }
    return s;
}

/* Row i is ignored: its loss and gradient must be exactly 0. */
static bool fz_jsd_ignored(const fz_jsd *c, int64_t i) {
    const int64_t *l = c->labels.host;
    return c->labels.bytes > 0 && l[i] == c->d.ignore_index;
}

/* After DISTIL_OK with data: every output element written, ignored rows 0, padding untouched,
 * and no NaN unless an input held a special value. */
static void fz_jsd_check_written(distil_ctx *ctx, fz_jsd *c) {
    const distil_jsd_desc *d = &c->d;
    bool none = d->reduction == DISTIL_REDUCTION_NONE;
    float *loss = malloc(c->loss.bytes);
    fz_buf_download(ctx, &c->loss, loss);
    int64_t n_loss = none ? d->rows : 1;
    for (int64_t i = 0; i < n_loss; i++) {
        if (d->rows == 0 ? loss[i] != 0.0f : fz_is_poison(loss, DISTIL_F32, (size_t)i)) {
            fz_fail("jsd: loss[%lld] = %g not written as required", (long long)i, loss[i]);
        }
        if (none && fz_jsd_ignored(c, i) && loss[i] != 0.0f) {
            fz_fail("jsd: ignored row %lld has loss %g", (long long)i, loss[i]);
        }
        if (!c->special && fabsf(d->grad_scale) < 1e30f && isnan(loss[i])) {
            fz_fail("jsd: loss[%lld] is NaN and no input was special", (long long)i);
        }
    }
    free(loss);
}

static void fz_jsd_check_grad(distil_ctx *ctx, fz_jsd *c) {
    bool own = c->grad_mode == FZ_GRAD_OWN;
    bool in_place = c->grad_mode == FZ_GRAD_IN_PLACE && !c->x_null;
    if ((!own && !in_place) || c->d.rows == 0) {
        return;
    }
    fz_buf *g = own ? &c->grad : &c->x;
    void *h = malloc(g->bytes);
    fz_buf_download(ctx, g, h);
    for (int64_t i = 0; i < c->d.rows; i++) {
        for (int64_t v = 0; v < c->gs; v++) {
            size_t k = (size_t)(i * c->gs + v);
            bool pad = v >= c->d.vocab;
            bool same = memcmp((char *)h + k * c->es, (char *)g->host + k * c->es, c->es) == 0;
            if (pad ? !same : fz_is_poison(h, c->d.dtype, k)) {
                fz_fail("jsd: grad (%lld, %lld): %s", (long long)i, (long long)v,
                        pad ? "padding was written" : "never written");
            }
            if (!pad && fz_jsd_ignored(c, i) && fz_get_value(h, c->d.dtype, k) != 0.0f) {
                fz_fail("jsd: ignored row %lld has a nonzero gradient", (long long)i);
            }
        }
    }
    free(h);
}

static void fz_jsd_check_after(distil_ctx *ctx, fz_jsd *c, distil_status s) {
    bool in_place = c->grad_mode == FZ_GRAD_IN_PLACE && s == DISTIL_OK;
    if (!in_place && !fz_buf_unchanged(ctx, &c->x)) {
        fz_fail("jsd: student_logp was modified (status %d)", (int)s);
    }
    if (!fz_buf_unchanged(ctx, &c->y) || !fz_buf_unchanged(ctx, &c->labels)) {
        fz_fail("jsd: teacher_logp or labels were modified (status %d)", (int)s);
    }
    if (s == DISTIL_OK) {
        fz_jsd_check_written(ctx, c);
        fz_jsd_check_grad(ctx, c);
    } else if (s != DISTIL_ERR_OUT_OF_MEMORY) {
        if (!fz_buf_unchanged(ctx, &c->loss) || !fz_buf_unchanged(ctx, &c->grad)) {
            fz_fail("jsd: refused with status %d but wrote an output", (int)s);
        }
    }
    fz_mark_message(ctx);
    fz_check_status(ctx, "ctx_synchronize after jsd", distil_ctx_synchronize(ctx), FZ_S(DISTIL_OK));
}

static void fz_jsd_free(distil_ctx *ctx, fz_jsd *c) {
    fz_buf *bufs[] = {&c->x, &c->y, &c->labels, &c->loss, &c->grad, &c->work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        fz_buf_free(ctx, bufs[i]);
    }
}

/* ---------------------------------------------------------------- numeric oracles */

/* The outputs of the last call: loss, then the gradient buffer (student_logp when in place). */
static unsigned char *fz_jsd_outputs(distil_ctx *ctx, fz_jsd *c, size_t *n) {
    fz_buf *g = c->grad_mode == FZ_GRAD_IN_PLACE ? &c->x : &c->grad;
    *n = c->loss.bytes + g->bytes;
    unsigned char *h = malloc(*n);
    if (h == NULL) {
        fz_fail("harness out of memory");
    }
    fz_buf_download(ctx, &c->loss, h);
    fz_buf_download(ctx, g, h + c->loss.bytes);
    return h;
}

/* The same call once more, from re-uploaded inputs and re-poisoned outputs, without faults. */
static void fz_jsd_rerun(distil_ctx *ctx, fz_jsd *c) {
    fz_buf_upload(ctx, &c->x);
    fz_buf_upload(ctx, &c->loss);
    fz_buf_upload(ctx, &c->grad);
    long fault = c->fault;
    c->fault = -1;
    fz_check_status(ctx, "jsd rerun", fz_jsd_call(ctx, c), FZ_S(DISTIL_OK));
    c->fault = fault;
}

/* The same case on the ref context: its outputs, or NULL if the harness cannot allocate. */
static unsigned char *fz_jsd_on_ref(const fz_jsd *c, size_t *n) {
    distil_ctx *ref = fz_ref_context();
    fz_jsd r = *c;
    r.fault = -1;
    r.lend = 0;
    const fz_buf *src[] = {&c->x, &c->y, &c->labels, &c->loss, &c->grad};
    fz_buf *dst[] = {&r.x, &r.y, &r.labels, &r.loss, &r.grad, &r.work};
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++) {
        *dst[i] = (fz_buf){0};
    }
    unsigned char *out = NULL;
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof src / sizeof src[0]; i++) {
        ok = fz_buf_alloc(ref, dst[i], src[i]->bytes);
        if (ok) {
            memcpy(dst[i]->host, src[i]->host, src[i]->bytes);
            fz_buf_upload(ref, dst[i]);
        }
    }
    if (ok) {
        fz_check_status(ref, "jsd on ref", fz_jsd_call(ref, &r), FZ_S(DISTIL_OK));
        out = fz_jsd_outputs(ref, &r, n);
    }
    fz_jsd_free(ref, &r);
    return out;
}

/* Successful call on tame inputs: a rerun gives the same bits, and ref agrees. */
static void fz_jsd_numeric(distil_ctx *ctx, fz_jsd *c) {
    size_t n = 0, n2 = 0, nr = 0;
    unsigned char *first = fz_jsd_outputs(ctx, c, &n);
    fz_jsd_rerun(ctx, c);
    unsigned char *second = fz_jsd_outputs(ctx, c, &n2);
    fz_same_bits("jsd", first, second, n);
    unsigned char *ref =
        strcmp(distil_ctx_backend_name(ctx), "ref") != 0 ? fz_jsd_on_ref(c, &nr) : NULL;
    bool grad = c->grad_mode == FZ_GRAD_OWN || (c->grad_mode == FZ_GRAD_IN_PLACE && !c->x_null);
    if (ref != NULL) {
        size_t n_loss = c->d.reduction == DISTIL_REDUCTION_NONE ? (size_t)c->d.rows : 1;
        fz_parity_loss("jsd vs ref", (const float *)first, (const float *)ref, n_loss, c->d.dtype);
        if (grad) {
            fz_parity_tensor("jsd gradient vs ref", first + c->loss.bytes, ref + c->loss.bytes,
                             c->d.dtype, c->d.rows, c->d.vocab, c->gs, false);
        }
    }
    free(first), free(second), free(ref);
}

/* The workspace query is pure: any descriptor, including huge ones, must be answered (huge
 * tensors may be refused as too large). */
static void fz_jsd_query(distil_ctx *ctx, fz_jsd *c) {
    size_t bytes = 12345;
    distil_status want = fz_jsd_expect(c, false);
    fz_mark_message(ctx);
    distil_status s = distil_jsd_workspace_size(ctx, c->desc_null ? NULL : &c->d, &bytes);
    if (want == DISTIL_OK && c->huge && s == DISTIL_ERR_INVALID_ARG) {
        fz_check_too_large(ctx, "jsd_workspace_size");
        return;
    }
    fz_check_status(ctx, "jsd_workspace_size", s, FZ_S(want));
}

/* The status of a call: one of `allowed`, or "too large" for a valid descriptor with a field
 * past the caps (even an unused stride is checked). */
static void fz_jsd_check_status(distil_ctx *ctx, const fz_jsd *c, const char *what, distil_status s,
                                distil_status want, fz_statuses allowed) {
    if (want == DISTIL_OK && c->huge && s == DISTIL_ERR_INVALID_ARG) {
        fz_check_too_large(ctx, what);
    } else {
        fz_check_status(ctx, what, s, allowed);
    }
}

/* DISTIL_FUZZ_VERBOSE=1: what the input decoded to, for reading a crash. */
static void fz_jsd_print(const fz_jsd *c, const char *backend) {
    const distil_jsd_desc *d = &c->d;
    fprintf(stderr,
            "jsd on %s: struct_size %zu rows %lld vocab %lld strides %lld %lld %lld dtype %d "
            "beta %g ignore %lld reduction %d grad_scale %g divergence %d alpha %g normaliser %g | "
            "desc_null %d x_null %d y_null %d "
            "labels %d loss_null %d grad_mode %d lend %zu fault %ld backed %d\n",
            backend, d->struct_size, (long long)d->rows, (long long)d->vocab,
            (long long)d->student_stride, (long long)d->teacher_stride, (long long)d->grad_stride,
            (int)d->dtype, (double)d->beta, (long long)d->ignore_index, (int)d->reduction,
            (double)d->grad_scale, (int)d->divergence, (double)d->alpha, (double)d->normaliser,
            c->desc_null, c->x_null, c->y_null, c->labels_on, c->loss_null, c->grad_mode, c->lend,
            c->fault, c->backed);
}

void fz_case_jsd(fz_in *in, distil_ctx *ctx) {
    fz_jsd c;
    fz_jsd_read(in, &c);
    if (fz_verbose()) {
        fz_jsd_print(&c, distil_ctx_backend_name(ctx));
    }
    fz_jsd_query(ctx, &c);
    if (!c.backed) { /* every pointer NULL: refused, or accepted without touching memory */
        c.x_null = c.y_null = c.loss_null = true;
        c.labels_on = false;
        c.grad_mode = FZ_GRAD_NONE;
        distil_status want = fz_jsd_expect(&c, true);
        fz_mark_message(ctx);
        distil_status s = distil_jsd(ctx, c.desc_null ? NULL : &c.d, NULL, NULL, NULL, NULL, NULL);
        fz_jsd_check_status(ctx, &c, "jsd (unbacked, NULL data)", s, want, FZ_S(want));
        return;
    }
    distil_status want = fz_jsd_expect(&c, true);
    if (!fz_jsd_alloc(ctx, &c)) {
        fz_jsd_free(ctx, &c);
        return;
    }
    fz_jsd_fill(in, ctx, &c);
    fz_statuses allowed = FZ_S(want);
    if (want == DISTIL_OK) {
        allowed |= (c.fault >= 0 ? FZ_S(DISTIL_ERR_OUT_OF_MEMORY) : 0) |
                   (c.lend > 0 ? FZ_S(DISTIL_ERR_WORKSPACE) : 0);
    }
    distil_status s = fz_jsd_call(ctx, &c);
    fz_jsd_check_status(ctx, &c, "jsd", s, want, allowed);
    fz_jsd_check_after(ctx, &c, s);
    if (s == DISTIL_OK && !c.special) {
        fz_jsd_numeric(ctx, &c);
    }
    if (s == DISTIL_ERR_OUT_OF_MEMORY) { /* the context must work afterwards */
        fz_buf_upload(ctx, &c.x);
        fz_buf_upload(ctx, &c.loss);
        fz_buf_upload(ctx, &c.grad);
        c.fault = -1;
        s = fz_jsd_call(ctx, &c);
        fz_check_status(ctx, "jsd after an allocation fault", s, allowed);
        fz_jsd_check_after(ctx, &c, s);
    }
    fz_jsd_free(ctx, &c);
}
