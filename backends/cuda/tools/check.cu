/*
 * check.cu - distil-cuda-check: the cuda backend against the float64 "ref" backend through the
 * public API (random non-zero inputs, poisoned outputs, every element compared with the SPEC
 * section 3 tolerances), plus bad-label, pointer, determinism and portable-GEMM checks.
 * `distil-cuda-check small` runs only the small cases; `distil-cuda-check bench` times the seed
 * workloads instead (check_bench.cu). Exit status: 0 all passed, 1 some check failed, 2 setup
 * error.
 */
#include "check_common.cuh"

int ck_bench_main(int argc, char **argv);

/* ------------------------------------------------------------------ JSD */

struct jsd_case {
    int64_t rows, vocab, pad; /* row strides are vocab + pad */
    distil_dtype dtype;
    float beta;
    distil_reduction red;
    bool labels, grad, in_place, neg_inf;
};

/* Log-softmax rows of random logits (std 2), rounded to the dtype; padding NaN (never read). */
static void ck_fill_logp(ck_rng &r, ck_host &h, int64_t rows, int64_t v, int64_t ld, bool neg_inf) {
    std::vector<double> z((size_t)v);
    for (int64_t i = 0; i < rows; i++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < v; j++) {
            z[j] = 2.0 * r.normal();
            mx = fmax(mx, z[j]);
        }
        for (int64_t j = 0; j < v; j++) {
            s += exp(z[j] - mx);
        }
        for (int64_t j = 0; j < ld; j++) {
            float val = j < v ? (float)(z[j] - mx - log(s)) : NAN;
            if (j < v && neg_inf && v > 2 && r.uniform() < 0.05) {
                val = -INFINITY;
            }
            h.set((size_t)(i * ld + j), val);
        }
    }
}

static void ck_jsd_desc(const jsd_case &c, distil_jsd_desc *d) {
    distil_jsd_desc_init(d);
    d->rows = c.rows;
    d->vocab = c.vocab;
    d->student_stride = d->teacher_stride = d->grad_stride = c.vocab + c.pad;
    d->dtype = c.dtype;
    d->beta = c.beta;
    d->reduction = c.red;
    d->grad_scale = 0.75f;
}

static void ck_jsd_case(distil_ctx *gpu, distil_ctx *ref, const jsd_case &c, uint64_t seed) {
    printf("jsd %s T=%lld V=%lld pad=%lld beta=%g red=%d labels=%d grad=%d inplace=%d -inf=%d\n",
           distil_dtype_name(c.dtype), (long long)c.rows, (long long)c.vocab, (long long)c.pad,
           c.beta, (int)c.red, c.labels, c.grad, c.in_place, c.neg_inf);
    ck_rng r(seed);
    const int64_t ld = c.vocab + c.pad;
    const size_t n = (size_t)(c.rows * ld);
    ck_host x(c.dtype, n), y(c.dtype, n), lab(DISTIL_F32, 2 * (size_t)c.rows);
    ck_fill_logp(r, x, c.rows, c.vocab, ld, c.neg_inf);
    ck_fill_logp(r, y, c.rows, c.vocab, ld, false);
    int64_t *labels = (int64_t *)lab.ptr();
    for (int64_t i = 0; i < c.rows; i++) {
        labels[i] = r.uniform() < 0.25 ? -100 : (int64_t)(r.uniform() * (double)c.vocab);
    }
    distil_jsd_desc d;
    ck_jsd_desc(c, &d);
    const size_t n_loss = c.red == DISTIL_REDUCTION_NONE ? (size_t)c.rows : 1;
    ck_host loss_ref(DISTIL_F32, n_loss), loss_got(DISTIL_F32, n_loss);
    ck_host grad_ref(c.dtype, n), grad_got(c.dtype, n);
    ck_host x_ref = x; /* the ref may run in place too */
    void *gref = c.grad ? (c.in_place ? x_ref.ptr() : grad_ref.ptr()) : nullptr;
    CK_OK(ref, distil_jsd(ref, &d, x_ref.ptr(), y.ptr(), c.labels ? labels : nullptr,
                          (float *)loss_ref.ptr(), gref));
    ck_dev dx(gpu, x), dy(gpu, y), dl(gpu, lab), dloss(gpu, n_loss * 4),
        dg(gpu, n * ck_es(c.dtype));
    dloss.poison();
    dg.poison();
    void *gdev = c.grad ? (c.in_place ? dx.p : dg.p) : nullptr;
    CK_OK(gpu, distil_jsd(gpu, &d, dx.p, dy.p, c.labels ? (const int64_t *)dl.p : nullptr,
                          (float *)dloss.p, gdev));
    CK_OK(gpu, distil_ctx_synchronize(gpu));
    dloss.download(loss_got);
    ck_compare("loss", loss_got, loss_ref, ck_tol_loss(c.dtype));
    if (!c.in_place) {
        ck_host loss2(DISTIL_F32, n_loss), grad1(c.dtype, n), grad2(c.dtype, n);
        dg.download(grad1);
        CK_OK(gpu, distil_jsd(gpu, &d, dx.p, dy.p, c.labels ? (const int64_t *)dl.p : nullptr,
                              (float *)dloss.p, gdev));
        dloss.download(loss2);
        dg.download(grad2);
        ck_expect(loss2.bytes == loss_got.bytes && grad1.bytes == grad2.bytes,
                  "bitwise identical rerun");
    }
    if (c.grad) {
        if (c.in_place) {
            dx.download(grad_got);
            ck_compare("grad (in place)", grad_got, x_ref, ck_tol_grad(c.dtype, false));
        } else {
            dg.download(grad_got);
            /* padding is not written by either: compare rows only */
            for (size_t i = 0; i < n; i++) {
                if ((int64_t)(i % (size_t)ld) >= c.vocab) {
                    grad_got.set(i, 0.0f);
                    grad_ref.set(i, 0.0f);
                }
            }
            ck_compare("grad", grad_got, grad_ref, ck_tol_grad(c.dtype, false));
        }
    }
}

static void ck_jsd_all(distil_ctx *gpu, distil_ctx *ref, bool small) {
    const distil_reduction BM = DISTIL_REDUCTION_BATCHMEAN, SUM = DISTIL_REDUCTION_SUM,
                           NONE = DISTIL_REDUCTION_NONE;
    const jsd_case cases[] = {
        {64, 128256, 0, DISTIL_F32, 0.5f, BM, false, true, false, false},
        {300, 128256, 0, DISTIL_F32, 0.5f, BM, true, true, false, false},
        {300, 32003, 5, DISTIL_BF16, 0.3f, SUM, true, false, false, false},
        {64, 128256, 0, DISTIL_F32, 0.5f, BM, false, false, false, false},
        {64, 128256, 0, DISTIL_BF16, 0.5f, BM, true, true, false, false},
        {16, 128257, 3, DISTIL_F16, 0.5f, SUM, true, true, false, true},
        {37, 1271, 9, DISTIL_F32, 0.0f, BM, true, true, false, true},
        {37, 1271, 0, DISTIL_F32, 1.0f, NONE, true, true, false, false},
        {37, 4096, 0, DISTIL_BF16, 0.0f, NONE, false, true, true, false},
        {33, 4096, 0, DISTIL_F32, 0.25f, BM, true, true, true, true},
        {5, 3, 1, DISTIL_F32, 0.5f, BM, true, true, false, false},
        {7, 1, 0, DISTIL_F16, 0.5f, SUM, false, true, false, false},
    };
    uint64_t seed = 100;
    for (const jsd_case &c : cases) {
        if (!small || c.vocab * c.rows <= 200000) {
            ck_jsd_case(gpu, ref, c, seed++);
        }
    }
}

/* ------------------------------------------------------------------ fused */

struct fused_case {
    int64_t rows, vocab, hs, ht;
    distil_dtype dtype;
    bool bias;
    float beta, tau, wh, ws;
    int64_t chunk;
    bool grads, parts;
    int64_t bad_row; /* >= 0: that row gets an invalid label */
};

struct fused_inputs {
    ck_host xs, ws, bs, xt, wt, bt, lab;
    fused_inputs(const fused_case &c)
        : xs(c.dtype, (size_t)(c.rows * c.hs)), ws(c.dtype, (size_t)(c.vocab * c.hs)),
          bs(c.dtype, (size_t)c.vocab), xt(c.dtype, (size_t)(c.rows * c.ht)),
          wt(c.dtype, (size_t)(c.vocab * c.ht)), bt(c.dtype, (size_t)c.vocab),
          lab(DISTIL_F32, 2 * (size_t)c.rows) {}
};

/* Uniform(-a, a) with |v| >= a / 64 (never zero), rounded to the dtype. */
static void ck_fill_uniform(ck_rng &r, ck_host &h, double a) {
    for (size_t i = 0; i < h.n; i++) {
        double u = 2.0 * r.uniform() - 1.0;
        if (fabs(u) < 1.0 / 64) {
            u = u < 0 ? -1.0 / 64 : 1.0 / 64;
        }
        h.set(i, (float)(a * u));
    }
}

static void ck_fused_fill(const fused_case &c, fused_inputs &in, uint64_t seed) {
    ck_rng r(seed);
    ck_fill_uniform(r, in.xs, 1.0);
    ck_fill_uniform(r, in.ws, 3.0 * sqrt(3.0 / (double)c.hs));
    ck_fill_uniform(r, in.bs, 0.5);
    ck_fill_uniform(r, in.xt, 1.0);
    ck_fill_uniform(r, in.wt, 3.0 * sqrt(3.0 / (double)c.ht));
    ck_fill_uniform(r, in.bt, 0.5);
    int64_t *l = (int64_t *)in.lab.ptr();
    for (int64_t i = 0; i < c.rows; i++) {
        l[i] = r.uniform() < 0.2 ? -100 : (int64_t)(r.uniform() * (double)c.vocab);
    }
    if (c.bad_row >= 0) {
        l[c.bad_row] = c.vocab + 5;
        if (c.bad_row + 3 < c.rows) {
            l[c.bad_row + 3] = -7;
        }
    }
}

static void ck_fused_desc(const fused_case &c, distil_fused_linear_jsd_desc *d) {
    distil_fused_linear_jsd_desc_init(d);
    d->rows = c.rows;
    d->vocab = c.vocab;
    d->student_hidden = c.hs;
    d->teacher_hidden = c.ht;
    d->dtype = c.dtype;
    d->beta = c.beta;
    d->temperature = c.tau;
    d->weight_hard = c.wh;
    d->weight_soft = c.ws;
    d->chunk_rows = c.chunk;
    d->return_parts = c.parts;
}

/* Outputs of one run: loss (1 or 3), grad_xs, grad_Ws, grad_bs. */
struct fused_outputs {
    ck_host loss, gx, gw, gb;
    fused_outputs(const fused_case &c)
        : loss(DISTIL_F32, 3), gx(c.dtype, (size_t)(c.rows * c.hs)),
          gw(c.dtype, (size_t)(c.vocab * c.hs)), gb(c.dtype, (size_t)c.vocab) {}
};

static distil_status ck_fused_ref(distil_ctx *ref, const fused_case &c, fused_inputs &in,
                                  fused_outputs &o) {
    distil_fused_linear_jsd_desc d;
    ck_fused_desc(c, &d);
    return distil_fused_linear_jsd(
        ref, &d, in.xs.ptr(), in.ws.ptr(), c.bias ? in.bs.ptr() : nullptr, in.xt.ptr(), in.wt.ptr(),
        c.bias ? in.bt.ptr() : nullptr, (const int64_t *)in.lab.ptr(), (float *)o.loss.ptr(),
        c.grads ? o.gx.ptr() : nullptr, c.grads ? o.gw.ptr() : nullptr,
        c.grads && c.bias ? o.gb.ptr() : nullptr);
}

/* Runs the case on the GPU context; returns the status of synchronize. */
static distil_status ck_fused_gpu(distil_ctx *gpu, const fused_case &c, fused_inputs &in,
                                  fused_outputs &o) {
    distil_fused_linear_jsd_desc d;
    ck_fused_desc(c, &d);
    ck_dev xs(gpu, in.xs), ws(gpu, in.ws), bs(gpu, in.bs), xt(gpu, in.xt), wt(gpu, in.wt),
        bt(gpu, in.bt), lab(gpu, in.lab);
    ck_dev loss(gpu, 12), gx(gpu, o.gx.n * ck_es(c.dtype)), gw(gpu, o.gw.n * ck_es(c.dtype)),
        gb(gpu, o.gb.n * ck_es(c.dtype));
    loss.poison();
    gx.poison();
    gw.poison();
    gb.poison();
    CK_OK(gpu,
          distil_fused_linear_jsd(gpu, &d, xs.p, ws.p, c.bias ? bs.p : nullptr, xt.p, wt.p,
                                  c.bias ? bt.p : nullptr, (const int64_t *)lab.p, (float *)loss.p,
                                  c.grads ? gx.p : nullptr, c.grads ? gw.p : nullptr,
                                  c.grads && c.bias ? gb.p : nullptr));
    distil_status s = distil_ctx_synchronize(gpu);
    loss.download(o.loss);
    gx.download(o.gx);
    gw.download(o.gw);
    gb.download(o.gb);
    return s;
}

static void ck_fused_compare(const fused_case &c, fused_outputs &got, fused_outputs &ref) {
    ck_host l1(DISTIL_F32, c.parts ? 3 : 1), l2(DISTIL_F32, c.parts ? 3 : 1);
    for (size_t i = 0; i < l1.n; i++) {
        l1.set(i, got.loss.get(i));
        l2.set(i, ref.loss.get(i));
    }
    ck_compare(c.parts ? "loss + parts" : "loss", l1, l2, ck_tol_loss(c.dtype));
    if (c.grads) {
        ck_compare("grad_xs", got.gx, ref.gx, ck_tol_grad(c.dtype, true));
        ck_compare("grad_Ws", got.gw, ref.gw, ck_tol_grad(c.dtype, true));
        if (c.bias) {
            ck_compare("grad_bs", got.gb, ref.gb, ck_tol_grad(c.dtype, true));
        }
    }
}

static void ck_fused_case(distil_ctx *gpu, distil_ctx *ref, const fused_case &c, uint64_t seed,
                          bool twice) {
    printf("fused %s T=%lld V=%lld Hs=%lld Ht=%lld bias=%d beta=%g tau=%g w=%g/%g chunk=%lld "
           "grads=%d parts=%d bad=%lld\n",
           distil_dtype_name(c.dtype), (long long)c.rows, (long long)c.vocab, (long long)c.hs,
           (long long)c.ht, c.bias, c.beta, c.tau, c.wh, c.ws, (long long)c.chunk, c.grads, c.parts,
           (long long)c.bad_row);
    fused_inputs in(c);
    ck_fused_fill(c, in, seed);
    fused_outputs ref_out(c), got(c);
    distil_status rs = ck_fused_ref(ref, c, in, ref_out);
    if (rs != DISTIL_OK && !(c.bad_row >= 0 && rs == DISTIL_ERR_INVALID_LABEL)) {
        CK_DIE("ref: %s", distil_ctx_last_error(ref));
    }
    distil_status s = ck_fused_gpu(gpu, c, in, got);
    if (c.bad_row >= 0) {
        char want[64];
        snprintf(want, sizeof want, "row %lld has label", (long long)c.bad_row);
        ck_expect(s == DISTIL_ERR_INVALID_LABEL &&
                      strstr(distil_ctx_last_error(gpu), want) != nullptr,
                  "synchronize reports the first invalid label");
        printf("       message: %s\n", distil_ctx_last_error(gpu));
        ck_expect(distil_ctx_synchronize(gpu) == DISTIL_OK, "reported once");
    } else if (s != DISTIL_OK) {
        CK_DIE("synchronize: %s", distil_ctx_last_error(gpu));
    }
    ck_fused_compare(c, got, ref_out);
    if (twice) {
        fused_outputs again(c);
        (void)ck_fused_gpu(gpu, c, in, again);
        ck_expect(memcmp(again.loss.ptr(), got.loss.ptr(), 12) == 0 &&
                      memcmp(again.gx.ptr(), got.gx.ptr(), got.gx.n * ck_es(c.dtype)) == 0 &&
                      memcmp(again.gw.ptr(), got.gw.ptr(), got.gw.n * ck_es(c.dtype)) == 0,
                  "bitwise identical rerun");
    }
}

static void ck_fused_all(distil_ctx *gpu, distil_ctx *ref, bool small) {
    const fused_case cases[] = {
        {64, 32000, 256, 512, DISTIL_BF16, false, 0.5f, 1.0f, 0.5f, 0.5f, 0, true, true, -1},
        {64, 32000, 256, 512, DISTIL_F32, true, 0.5f, 2.0f, 0.3f, 0.7f, 17, true, false, -1},
        {64, 32000, 256, 512, DISTIL_F16, true, 0.0f, 1.0f, 0.5f, 0.5f, 24, true, true, -1},
        {50, 4099, 96, 160, DISTIL_F32, true, 1.0f, 1.5f, 0.5f, 0.5f, 16, true, true, 9},
        {50, 4099, 96, 160, DISTIL_BF16, false, 0.25f, 1.0f, 0.0f, 1.0f, 0, false, true, -1},
        {23, 1000, 64, 64, DISTIL_F32, false, 0.5f, 1.0f, 1.0f, 0.0f, 7, true, false, 3},
        {40, 2053, 64, 96, DISTIL_BF16, true, 0.5f, 2.0f, 0.5f, 0.5f, 13, true, true, -1},
        {40, 2052, 64, 96, DISTIL_F16, true, 0.75f, 1.0f, 0.5f, 0.5f, 0, true, false, -1},
    };
    uint64_t seed = 500;
    for (const fused_case &c : cases) {
        if (!small || c.vocab <= 5000) {
            ck_fused_case(gpu, ref, c, seed++, &c == &cases[0]);
        }
    }
}

/* ------------------------------------------------------------------ misc */

/* A host pointer where device memory is required is refused with its name in the message. */
static void ck_pointer(distil_ctx *gpu) {
    printf("check_pointer\n");
    std::vector<float> host(64, -1.0f);
    ck_dev dev(gpu, 64 * 4), loss(gpu, 4);
    distil_jsd_desc d;
    distil_jsd_desc_init(&d);
    d.rows = 4;
    d.vocab = 16;
    distil_status s = distil_jsd(gpu, &d, host.data(), dev.p, nullptr, (float *)loss.p, nullptr);
    ck_expect(s == DISTIL_ERR_INVALID_ARG &&
                  strstr(distil_ctx_last_error(gpu), "student") != nullptr,
              "host student pointer refused");
    printf("       message: %s\n", distil_ctx_last_error(gpu));
}

static distil_ctx *ck_ctx(const char *backend) {
    distil_ctx *ctx = nullptr;
    if (distil_ctx_create(&ctx, backend, 0) != DISTIL_OK) {
        CK_DIE("ctx %s: %s", backend, distil_ctx_last_error(nullptr));
    }
    return ctx;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bench") == 0) {
        return ck_bench_main(argc - 1, argv + 1);
    }
    /* `small`: only the small cases (for compute-sanitizer runs). */
    const bool small = argc > 1 && strcmp(argv[1], "small") == 0;
    distil_ctx *gpu = ck_ctx("cuda");
    distil_ctx *ref = ck_ctx("ref");
    printf("device: %s\n", distil_ctx_device_name(gpu));
    ck_pointer(gpu);
    ck_jsd_all(gpu, ref, small);
    ck_fused_all(gpu, ref, small);
    distil_ctx_destroy(gpu);
    /* The portable GEMM and the shared-memory row kernel, selected at context creation. */
    setenv("DISTIL_CUDA_GEMM", "portable", 1);
    setenv("DISTIL_CUDA_DISTILL", "stream", 1);
    printf("-- DISTIL_CUDA_GEMM=portable DISTIL_CUDA_DISTILL=stream\n");
    gpu = ck_ctx("cuda");
    ck_fused_all(gpu, ref, true);
    distil_ctx_destroy(gpu);
    distil_ctx_destroy(ref);
    printf("%d checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
