/*
 * fuzz.h - the libFuzzer target over the public API (docs/RELIABILITY.md): shared declarations.
 * An input is read as a stream of decisions (which call, which backend, every descriptor field,
 * which pointers are NULL, labels, special float values, an allocation fault); a short input
 * reads as zeros, i.e. the defaults. Every call is checked against what the contract says it
 * must return, and a broken rule aborts with a description (libFuzzer records it as a crash).
 */
#ifndef DISTIL_FUZZ_H
#define DISTIL_FUZZ_H

#include "distil.h"
#include "distil_testing.h" /* fault injection: core/testing, never installed */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Caps on what the target allocates: descriptors whose tensors fit are "backed" by real
 * buffers of exactly the described size; larger ones are called with NULL data. The vocabulary
 * is mostly drawn up to FZ_NARROW_VOCAB, and one case in eight up to FZ_MAX_VOCAB (fz_vocab_cap):
 * rows of more than two of the cpu kernels' 512-float tiles with a ragged tail, wider than an
 * opencl work-group, so that the fuzzer reaches those paths too. */
#define FZ_MAX_ROWS      8
#define FZ_NARROW_VOCAB  48
#define FZ_MAX_VOCAB     1100
#define FZ_MAX_HIDDEN    12
#define FZ_NARROW_STRIDE 56
#define FZ_MAX_STRIDE    (FZ_MAX_VOCAB + 8)

/* ---------------------------------------------------------------- input stream */

typedef struct fz_in {
    const uint8_t *p;
    size_t n, pos;
    uint64_t rng; /* seeded from the input: bulk data that the fuzzer need not spell out */
} fz_in;

void fz_in_init(fz_in *in, const uint8_t *data, size_t size);
uint8_t fz_byte(fz_in *in); /* 0 once the input is exhausted */
uint32_t fz_u32(fz_in *in);
uint64_t fz_u64(fz_in *in);
unsigned fz_pick(fz_in *in, unsigned n); /* in [0, n) */
bool fz_bool(fz_in *in);
double fz_rand_normal(fz_in *in); /* from the seeded generator, not from the input */

/* An int64 field: mostly the default or a small valid value in [lo, hi], sometimes an edge
 * value (0, -1, INT64_MIN, INT64_MAX, 2^31, 2^62, ...) or 8 raw bytes. */
int64_t fz_i64_field(fz_in *in, int64_t dflt, int64_t lo, int64_t hi);
/* The upper end of a drawn vocabulary: FZ_MAX_VOCAB one time in eight, else FZ_NARROW_VOCAB. */
int64_t fz_vocab_cap(fz_in *in);
/* The upper end of a drawn row stride for a vocabulary: a few past it (FZ_NARROW_STRIDE for the
 * narrow ones). */
int64_t fz_stride_cap(int64_t vocab);
/* A float field: mostly the default or a value in [lo, hi], sometimes a special (+-0, subnormal,
 * FLT_MAX, +-inf, NaN, just outside [lo, hi]) or 4 raw bytes. */
float fz_float_field(fz_in *in, float dflt, float lo, float hi);
/* A special data value: NaN, +-inf, +-1e4, 0, subnormal, FLT_MAX, ... */
float fz_special_value(fz_in *in);

/* ---------------------------------------------------------------- checks */

/* DISTIL_FUZZ_VERBOSE=1: print each decoded case (for reading a crash). */
bool fz_verbose(void);

/* docs/SPEC.md §6 in a descriptor: a divergence (mostly valid, sometimes past the enum), alpha and
 * a host normaliser (mostly 0: counted), drawn from the input; and whether they are refused. */
void fz_read_divergence(fz_in *in, distil_divergence *div, float *alpha, float *normaliser);
bool fz_bad_divergence(distil_divergence div, float alpha, float normaliser);

/* The input being run, saved by fz_fail as fuzz-failure-<hash> in the working directory. */
void fz_set_current(const uint8_t *data, size_t size);

/* Called by fz_fail instead of abort() when set (the replay driver jumps to the next input). */
extern void (*fz_fail_hook)(void);

/* Abort with a description: the fuzzer's "crash". */
void fz_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;

/* A bit set of statuses, for "the call may return any of these". */
typedef uint32_t fz_statuses;
#define FZ_S(s) ((fz_statuses)1u << (unsigned)(s))

/* Checks a returned status: it must be in `allowed`, and a failure must leave a fresh message
 * on ctx (or on the thread for ctx == NULL). fz_mark_message plants a known message first so
 * that a stale one is caught. `what` names the call in the report. */
void fz_mark_message(distil_ctx *ctx);
void fz_check_status(distil_ctx *ctx, const char *what, distil_status got, fz_statuses allowed);
/* A valid but huge descriptor was refused: the message must say that it is too large. */
void fz_check_too_large(distil_ctx *ctx, const char *what);

/* ---------------------------------------------------------------- device buffers */

/* A buffer in the context's memory with its host mirror (bytes may be 0: dev == NULL). */
typedef struct fz_buf {
    void *host;
    void *dev;
    size_t bytes;
} fz_buf;

bool fz_buf_alloc(distil_ctx *ctx, fz_buf *b, size_t bytes); /* false: allocation refused */
void fz_buf_upload(distil_ctx *ctx, fz_buf *b);
void fz_buf_download(distil_ctx *ctx, fz_buf *b, void *host); /* into host (bytes) */
void fz_buf_free(distil_ctx *ctx, fz_buf *b);
/* The host mirror filled with a NaN pattern that no computation produces (0x7FDE per 16 bits). */
void fz_buf_poison(fz_buf *b);
/* Device contents equal to the host mirror: the call did not touch the buffer. */
bool fz_buf_unchanged(distil_ctx *ctx, const fz_buf *b);
/* Element i (dtype) of host memory still holds the poison pattern. */
bool fz_is_poison(const void *host, distil_dtype dtype, size_t i);

/* Data of a tensor: random values (negative log-probs, or normal), then a few special values
 * at positions drawn from the input; returns whether any special value was placed. */
bool fz_fill_data(fz_in *in, void *host, distil_dtype dtype, size_t n, bool logp); /* true: poked */
void fz_set_value(void *host, distil_dtype dtype, size_t i, float v);
float fz_get_value(const void *host, distil_dtype dtype, size_t i);

/* ---------------------------------------------------------------- numeric oracles */

/* A rerun of a successful call gave the same bytes. */
void fz_same_bits(const char *what, const void *first, const void *second, size_t bytes);
/* n fp32 loss values agree with ref's within a loose multiple of docs/SPEC.md §3. */
void fz_parity_loss(const char *what, const float *got, const float *ref, size_t n,
                    distil_dtype dt);
/* (rows, width) row stride ld of dtype agrees with ref's in the docs/SPEC.md §3 norm, loosely. */
void fz_parity_tensor(const char *what, const void *got, const void *ref, distil_dtype dt,
                      int64_t rows, int64_t width, int64_t ld, bool fused);

/* ---------------------------------------------------------------- cases */

/* Whether the fuzzer creates contexts on this backend: ref and cpu always; opencl with
 * DISTIL_FUZZ_OPENCL=1 and cuda / hip with DISTIL_FUZZ_GPU=1 (their drivers start slowly). */
bool fz_backend_allowed(const char *name);

/* The contexts of the run: one per backend under fuzzing, created once and reused. */
distil_ctx *fz_context(fz_in *in);
/* A "ref" context of its own, for parity (created once). */
distil_ctx *fz_ref_context(void);

void fz_case_jsd(fz_in *in, distil_ctx *ctx);
void fz_case_fused(fz_in *in, distil_ctx *ctx);
void fz_case_misc(fz_in *in, distil_ctx *ctx);

/* An allocation-failure countdown from the input, or -1 (none) for most inputs. */
long fz_fault_countdown(fz_in *in);

#endif /* DISTIL_FUZZ_H */
