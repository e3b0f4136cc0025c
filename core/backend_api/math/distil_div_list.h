/*
 * distil_div_list.h - the one list of the divergences of docs/SPEC.md §6, and of the element
 * modes of distil_elem.h that compute them. Everything that names, counts or maps a divergence
 * is expanded from it: the modes (DE_*) and de_elem's dispatch, distil_elem_div_make's mapping
 * (distil_elem_beta.c), the public range check and names (core/divergence.c:
 * distil_divergence_name / distil_divergence_from_name, which the Python package and distil-bench
 * read), and the kernels that make the mode a compile-time constant (cpu_kern_impl.h,
 * cuda div_math.cuh). Only macros and one enum, so that C, CUDA/HIP and OpenCL C all read it
 * (OpenCL embeds it before distil_elem.h: opencl_kernel_files.h).
 *
 * DISTIL_DIVERGENCE_LIST(X, A) calls X(A, NAME, name, MODE, term, make) once per divergence, in
 * the order of the public values 0, 1, ... (core/divergence.c asserts it):
 *   NAME  its value in distil.h is DISTIL_DIVERGENCE_NAME
 *   name  its name for users (distil_divergence_name): NAME in lower case
 *   MODE  its element mode DE_MODE at a generic parameter (a mode of its own: the first modes
 *         are the divergences', in the same order)
 *   term  the element term de_<term> of distil_elem.h for that mode: (sv, k, x, y, g, q)
 *   make  how its parameter picks the mode and constants, distil_elem_make_<make>:
 *         plain (none: MODE, no constants), beta (the generalised JSD of beta: MIX, MIXH, or
 *         the plain KLs at 0 and 1), skew / skew_reverse (a skew KL of alpha: MODE with m's
 *         weights; the plain forward / reverse KL at 0; ZERO at 1)
 * A is passed through to X unchanged (DE_MODES uses it to call its own macro).
 */
#ifndef DISTIL_DIV_LIST_H
#define DISTIL_DIV_LIST_H

// clang-format off
#define DISTIL_DIVERGENCE_LIST(X, A)                                                               \
    X(A, JSD,             "jsd",             MIX,  mix_lo, beta)                                   \
    X(A, FORWARD_KL,      "forward_kl",      FWD,  fwd,    plain)                                  \
    X(A, REVERSE_KL,      "reverse_kl",      REV,  rev,    plain)                                  \
    X(A, SKEW_KL,         "skew_kl",         SKL,  skl,    skew)                                   \
    X(A, SKEW_REVERSE_KL, "skew_reverse_kl", SRKL, srkl,   skew_reverse)                           \
    X(A, TVD,             "tvd",             TVD,  tvd,    plain)
// clang-format on

/* DISTIL_DIVERGENCES(X): X(NAME, name, MODE, term, make) per divergence. */
#define DISTIL_DIVERGENCE_ONE_(X, NAME, name, MODE, term, make) X(NAME, name, MODE, term, make)

#define DISTIL_DIVERGENCES(X) DISTIL_DIVERGENCE_LIST(DISTIL_DIVERGENCE_ONE_, X)

/* DE_MODES(X): X(MODE, term) per element mode: each divergence's own, then the two that only a
 * parameter reaches: ZERO (a skew KL at alpha = 1: m is the divergence's own argument, e = 0) and
 * MIXH (the generalised JSD at 1/2 < beta < 1: the near form's series on the other side). */
#define DE_MODE_OF_(X, NAME, name, MODE, term, make) X(MODE, term)

#define DE_MODES(X) DISTIL_DIVERGENCE_LIST(DE_MODE_OF_, X) X(ZERO, zero) X(MIXH, mix_hi)

/* The modes' numbers (a de_coef's mode): DE_MIX, DE_FWD, ..., in DE_MODES's order. */
#define DE_MODE_ENUM_(MODE, term) DE_##MODE,
enum de_mode { DE_MODES(DE_MODE_ENUM_) DE_MODE_COUNT };
#undef DE_MODE_ENUM_

#endif /* DISTIL_DIV_LIST_H */
