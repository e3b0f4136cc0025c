/*
 * test_topk_fuzz.c - a randomised harness for the top-k losses (docs/SPEC.md §7): many small
 * cases with every knob drawn at random (form, shape, k up to V, dtypes, id type, tail policy,
 * divergence (every one of docs/SPEC.md §6), beta, alpha, temperature, weights, reduction, padding,
 * ignored rows, chunking, a given normaliser, a duplicate id, -inf teacher log-probs and masked
 * student tokens off the ids), each run on the backend and on ref: the same status, every output
 * written and within §3's bounds of ref's (with tk_check's allowance where the case is
 * ill-conditioned), nothing written past the outputs, and a rerun bitwise
 * the same. DISTIL_TEST_SEED picks another sequence (default: a fixed one, so that CI is
 * repeatable); DISTIL_TEST_CASES the count (default 150).
 */
#include "topk_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static distil_ctx *g_ctx, *g_ref;
static const char *g_backend;

static const distil_topk_tail tails[] = {DISTIL_TOPK_TAIL, DISTIL_TOPK_RENORMALISE,
                                         DISTIL_TOPK_ZERO};
static const distil_divergence divs[] = {
    DISTIL_DIVERGENCE_FORWARD_KL, DISTIL_DIVERGENCE_REVERSE_KL,      DISTIL_DIVERGENCE_JSD,
    DISTIL_DIVERGENCE_SKEW_KL,    DISTIL_DIVERGENCE_SKEW_REVERSE_KL, DISTIL_DIVERGENCE_TVD};
static const distil_dtype dts[] = {DISTIL_F32, DISTIL_BF16, DISTIL_F16};
static const distil_reduction reds[] = {DISTIL_REDUCTION_BATCHMEAN, DISTIL_REDUCTION_SUM,
                                        DISTIL_REDUCTION_NONE};

/* alpha: the exact endpoints (0: the plain KL, 1: zero), near 0, near 1, or in [0, 0.9]. Near 1
 * the skew KLs' de/dx is (1 - alpha) q to first order, which the softmax Jacobian (fused) and the
 * renormalisation (q_v S_K / Q_K) cancel, leaving a gradient of order (1 - alpha)^2 that fp32
 * gets to about 1e-7 / (1 - alpha) relative: tk_check's allowance (topk_cond.c) is what bounds
 * it there, not §3's fixed bounds. */
static float random_alpha(tu_rng *r) {
    switch (tu_rand_int(r, 6)) {
    case 0:
        return 0.0f;
    case 1:
        return 1.0f;
    case 2:
        return (float)(1e-6 * tu_rand_uniform(r));
    case 3:
        return (float)(1.0 - 1e-6 * (0.05 + tu_rand_uniform(r)));
    default:
        return (float)(0.9 * tu_rand_uniform(r));
    }
}

/* Reverse KL itself, or the skew reverse KL at alpha = 0 (exactly it, docs/SPEC.md §6). */
static bool reverse_kl(const tk_spec *s) {
    return s->div == DISTIL_DIVERGENCE_REVERSE_KL ||
           (s->div == DISTIL_DIVERGENCE_SKEW_REVERSE_KL && s->alpha == 0.0f);
}

/* A random spec; reverse KL is kept away from the zero policy and from -inf teacher entries,
 * where the divergence is +inf by definition (tested in test_topk_ref's special values). */
static tk_spec random_spec(tu_rng *r, bool *teacher_inf) {
    tk_spec s = {0};
    s.fused = tu_rand_int(r, 2) == 1;
    s.t = 1 + tu_rand_int(r, 12);
    s.v = 1 + tu_rand_int(r, 300);
    s.k = 1 + tu_rand_int(r, s.v < 40 ? s.v : 40);
    if (tu_rand_int(r, 6) == 0) {
        s.k = s.v; /* the ids cover the vocabulary */
    }
    s.hs = 1 + tu_rand_int(r, 24);
    s.tdtype = dts[tu_rand_int(r, 3)];
    s.idt = tu_rand_int(r, 2) ? DISTIL_IDS_I32 : DISTIL_IDS_I64;
    s.tail = tails[tu_rand_int(r, 3)];
    s.div = divs[tu_rand_int(r, (int64_t)TU_LEN(divs))];
    s.beta = (float)tu_rand_uniform(r);
    s.alpha = random_alpha(r);
    s.tau = (float)(0.3 + 3.0 * tu_rand_uniform(r));
    s.w_hard = tu_rand_int(r, 4) == 0 ? 0.0f : (float)tu_rand_uniform(r);
    s.w_soft = (float)tu_rand_uniform(r) + 0.05f;
    s.teacher = (tk_teacher)tu_rand_int(r, 3);
    s.pad = tu_rand_int(r, 2);
    s.mixed_labels = tu_rand_int(r, 2);
    s.bias = tu_rand_int(r, 2);
    s.parts = tu_rand_int(r, 2);
    s.red = reds[tu_rand_int(r, s.fused ? 2 : 3)];
    s.chunk = tu_rand_int(r, 3) == 0 ? 0 : 1 + tu_rand_int(r, 5);
    s.dup_row = tu_rand_int(r, 8) == 0 ? tu_rand_int(r, s.t) : 0;
    s.normaliser = tu_rand_int(r, 5) == 0 ? (float)(0.5 + 10.0 * tu_rand_uniform(r)) : 0.0f;
    *teacher_inf = !reverse_kl(&s) && tu_rand_int(r, 4) == 0;
    if (reverse_kl(&s) && s.tail == DISTIL_TOPK_ZERO) {
        s.tail = DISTIL_TOPK_TAIL;
    }
    /* Renormalise with one used slot (k = 1, or the pad rows of k < 4) is drawn too: one outcome
     * (0, 0) on both sides, loss and gradient 0 exactly, where fp32 leaves a residue of a few ulp
     * of the slot's gradient (q_v S_K / Q_K is not g_v bit for bit); tk_check's allowance bounds
     * that residue (topk_cond.c). */
    return s;
}

static int64_t id_at(const tk_problem *p, size_t i) {
    return p->s.idt == DISTIL_IDS_I64 ? ((const int64_t *)p->ids)[i] : ((const int32_t *)p->ids)[i];
}

/* Special values: some teacher log-probs -inf (p = 0 in the cache; under renormalise every slot
 * of one row in three, P_K = 0: no renormalised teacher, a soft part of 0, docs/SPEC.md §7), and
 * in the log-prob form some student entries off the ids -inf (masked tokens). */
static void poke(tu_rng *r, tk_problem *p, bool teacher_inf) {
    const tk_spec *s = &p->s;
    for (int64_t i = 0; teacher_inf && i < s->t; i++) {
        int64_t j = tu_rand_int(r, s->k);
        bool whole = s->tail == DISTIL_TOPK_RENORMALISE && tu_rand_int(r, 3) == 0;
        for (int64_t u = whole ? 0 : j; u < (whole ? s->k : j + 1); u++) {
            tu_set(p->logp, s->tdtype, (size_t)(i * s->k + u), -INFINITY);
        }
    }
    if (s->fused || s->div == DISTIL_DIVERGENCE_FORWARD_KL || tu_rand_int(r, 2)) {
        return;
    }
    for (int64_t i = 0; i < s->t; i++) {
        int64_t v = tu_rand_int(r, s->v);
        bool in_k = false;
        for (int64_t j = 0; j < s->k; j++) {
            in_k = in_k || id_at(p, (size_t)(i * s->k + j)) == v;
        }
        if (!in_k) {
            tu_set(p->x, p->dtype, (size_t)(i * s->v + v), -INFINITY);
        }
    }
}

static void test_random(void **state) {
    (void)state;
    const char *seed_env = getenv("DISTIL_TEST_SEED");
    const char *cases_env = getenv("DISTIL_TEST_CASES");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 0x70b4ull;
    long cases = cases_env ? strtol(cases_env, NULL, 0) : 150;
    tu_rng r = tu_rng_make(seed);
    for (long c = 0; c < cases; c++) {
        bool teacher_inf;
        tk_spec s = random_spec(&r, &teacher_inf);
        distil_dtype dt = dts[tu_rand_int(&r, 3)];
        tk_problem p;
        tk_make(&p, &s, dt, seed * 1000 + (uint64_t)c);
        poke(&r, &p, teacher_inf);
        if (s.div == DISTIL_DIVERGENCE_TVD) {
            tk_untie(&p); /* again: the -inf entries moved P_t and Q_t */
        }
        tk_out o, again, ref;
        tk_run(g_ctx, &p, &o);
        tk_run(g_ref, &p, &ref);
        if (ref.st != DISTIL_OK && ref.st != DISTIL_ERR_INVALID_LABEL) {
            char name[256];
            tk_name(name, sizeof name, &s, dt);
            fail_msg("case %ld (%s): refused by ref: %d '%s'", c, name, ref.st, ref.msg);
        }
        if (o.st != ref.st) {
            char name[256];
            tk_name(name, sizeof name, &s, dt);
            fail_msg("case %ld (%s): status %d '%s', ref %d '%s'", c, name, o.st, o.msg, ref.st,
                     ref.msg);
        }
        if (getenv("DISTIL_TEST_VERBOSE")) {
            char name[256];
            tk_name(name, sizeof name, &s, dt);
            print_message("case %ld: %s%s dup %lld norm %g red %d wh %g\n", c, name,
                          teacher_inf ? " teacher-inf" : "", (long long)s.dup_row,
                          (double)s.normaliser, (int)s.red, (double)s.w_hard);
        }
        if (o.st == DISTIL_OK || o.st == DISTIL_ERR_INVALID_LABEL) {
            tk_check(&p, &o, &ref);
            tk_run(g_ctx, &p, &again);
            TU_CHECK_BITWISE("rerun loss", again.loss, o.loss, tk_nloss(&p) * sizeof(float));
            tk_out_free(&again);
        }
        tk_out_free(&o), tk_out_free(&ref);
        tk_free(&p);
    }
}

static int group_setup(void **state) {
    (void)state;
    if (distil_ctx_create(&g_ref, "ref", 0) != DISTIL_OK) {
        return -1;
    }
    return distil_ctx_create(&g_ctx, g_backend, 0) == DISTIL_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    distil_ctx_destroy(g_ctx);
    distil_ctx_destroy(g_ref);
    return 0;
}

static int run_group(const char *backend) {
    g_backend = backend;
    static const struct CMUnitTest tests[] = {cmocka_unit_test(test_random)};
    return cmocka_run_group_tests_name(tu_group_name("topk_fuzz", backend), tests, group_setup,
                                       group_teardown);
}

int main(void) {
    return tu_run_per_backend(run_group, false);
}
