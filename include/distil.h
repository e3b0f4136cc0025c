/*
 * distil.h - the whole public C API of distil, a library of LLM distillation losses.
 *
 * Two losses, forward and backward, on CUDA, HIP, OpenCL and the CPU behind one API:
 *   distil_jsd                generalised Jensen-Shannon divergence over log-probabilities
 *   distil_fused_linear_jsd   chunked LM-head projection + hard CE + soft JSD, never holding
 *                             the [T, V] logits
 * The math is docs/SPEC.md; every backend must match the float64 reference ("ref") within its
 * tolerances.
 *
 * Conventions
 *   - Every function that can fail returns a distil_status; DISTIL_OK is 0. The detailed message
 *     of the last failure is distil_ctx_last_error(ctx). No function aborts, exits or prints.
 *   - Tensors are row-major. Strides are in elements; a stride of 0 in a descriptor means
 *     "dense" (equal to the row width).
 *   - Every tensor pointer given to a loss lives in the memory of the context's backend: device
 *     pointers on "cuda"/"hip", cl_mem handles (cast to void *) on "opencl", host pointers on
 *     "cpu"/"ref". distil_malloc gives such memory on any backend.
 *   - Loss calls are asynchronous on the context's stream on GPU backends: they enqueue work and
 *     return. The loss is written to device memory; nothing synchronises the host inside a call.
 *   - A context serves one thread at a time; separate contexts are independent. A call that
 *     enters a context while another thread is inside a call on it returns DISTIL_ERR_BUSY
 *     (message in distil_ctx_last_error(NULL)) and does nothing.
 *   - Refused with DISTIL_ERR_INVALID_ARG (docs/SPEC.md §5): an output that overlaps an input or
 *     another output, or a lent workspace (byte ranges the descriptor gives; on "opencl" the
 *     same cl_mem or overlapping sub-buffers), except grad_student == student_logp with equal
 *     strides; on "opencl" a pointer that is not a cl_mem of the context at any entry point
 *     (copies, distil_free, distil_ctx_set_workspace, the losses) and a cl_mem smaller than the
 *     descriptor, copy or workspace size needs.
 *
 * Undefined behaviour that the library cannot detect cheaply (do not rely on any outcome):
 *   - using a context after distil_ctx_destroy, or destroying it twice;
 *   - freeing a buffer twice or using it after distil_free on the pointer backends ("cpu", "ref",
 *     "cuda", "hip"); on "opencl" a second distil_free of a distil_malloc buffer is refused, but
 *     passing a released cl_mem to a copy or a loss still reaches the driver;
 *   - on the pointer backends, a pointer that is not device memory of the right size: a host or
 *     garbage pointer, a buffer shorter than the descriptor (the library knows no sizes there;
 *     "cuda" / "hip" refuse a pointer the runtime does not know as device memory);
 *   - pointers not aligned to their element type (4 bytes for fp32, 2 for bf16 / fp16, 8 for
 *     labels); distil_malloc memory is 256-byte aligned;
 *   - inputs modified, or buffers freed, while an asynchronous call still uses them (GPU
 *     backends: until distil_ctx_synchronize or a later copy on the context);
 *   - two contexts or threads writing the same output buffer at once;
 *   - descriptor fields that are not what the caller holds (a vocab larger than the buffers on
 *     the pointer backends); the struct_size check catches only a mismatched header.
 */
#ifndef DISTIL_H
#define DISTIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(DISTIL_BUILDING_SHARED)
#define DISTIL_API __declspec(dllexport)
#elif defined(__GNUC__)
#define DISTIL_API __attribute__((visibility("default")))
#else
#define DISTIL_API
#endif

#if defined(__GNUC__)
#define DISTIL_NODISCARD __attribute__((warn_unused_result))
#else
#define DISTIL_NODISCARD
#endif

/* ---------------------------------------------------------------- version */

#define DISTIL_VERSION_MAJOR 0
#define DISTIL_VERSION_MINOR 1
#define DISTIL_VERSION_PATCH 0
#define DISTIL_VERSION_NUMBER                                                                      \
    (DISTIL_VERSION_MAJOR * 10000 + DISTIL_VERSION_MINOR * 100 + DISTIL_VERSION_PATCH)

/* The version of the library actually linked, as MAJOR*10000 + MINOR*100 + PATCH. */
DISTIL_API unsigned distil_version_number(void);
/* The same as "MAJOR.MINOR.PATCH"; a static string. */
DISTIL_API const char *distil_version_string(void);

/* ---------------------------------------------------------------- status */

/* Status codes. The numbers are pinned forever: new codes are only ever appended. */
typedef enum distil_status {
    DISTIL_OK = 0,
    DISTIL_ERR_INVALID_ARG = 1,   /* an argument broke a rule; the message names it */
    DISTIL_ERR_UNSUPPORTED = 2,   /* valid, but this backend or build cannot do it */
    DISTIL_ERR_OUT_OF_MEMORY = 3, /* host or device allocation failed; the context stays usable */
    DISTIL_ERR_BACKEND = 4,       /* the vendor runtime failed (driver, kernel launch, ...) */
    DISTIL_ERR_NOT_AVAILABLE = 5, /* backend not compiled in, or it has no such device */
    DISTIL_ERR_INVALID_LABEL = 6, /* a label outside [0, V) that is not ignore_index (deferred) */
    DISTIL_ERR_WORKSPACE = 7, /* the workspace lent with distil_ctx_set_workspace is too small */
    DISTIL_ERR_VERSION = 8,   /* a descriptor's struct_size is not one this library knows */
    DISTIL_ERR_BUSY = 9,      /* another thread is inside a call on this context; the message is
                                 in distil_ctx_last_error(NULL) of the refused thread */
} distil_status;

/* A static, human-readable name for a status; never NULL (unknown codes give "unknown status"). */
DISTIL_API const char *distil_status_string(distil_status status);

/* ---------------------------------------------------------------- dtypes */

typedef enum distil_dtype {
    DISTIL_F32 = 0,
    DISTIL_BF16 = 1,
    DISTIL_F16 = 2,
} distil_dtype;

/* Bytes per element of a dtype; 0 for an unknown dtype. */
DISTIL_API size_t distil_dtype_size(distil_dtype dtype);
/* "f32", "bf16", "f16", or "unknown". */
DISTIL_API const char *distil_dtype_name(distil_dtype dtype);

/* ---------------------------------------------------------------- backends */

/*
 * Backends compiled into this build, in priority order (cuda, hip, opencl, cpu, ref).
 * distil_backend_name(i) is NULL for i outside [0, distil_backend_count()).
 */
DISTIL_API int distil_backend_count(void);
DISTIL_API const char *distil_backend_name(int index);

/*
 * How many devices the named backend sees (probed once per process, thread-safe).
 * Returns DISTIL_OK and *n_devices >= 1 when it has a device, DISTIL_ERR_NOT_AVAILABLE with
 * *n_devices = 0 when it is compiled in but finds none, and DISTIL_ERR_INVALID_ARG for a name
 * that is not compiled in. The message goes to distil_ctx_last_error(NULL).
 */
DISTIL_API distil_status distil_backend_device_count(const char *name, int *n_devices);

/* ---------------------------------------------------------------- context */

typedef struct distil_ctx distil_ctx;

/*
 * Create a context on one device of one backend.
 *   backend  "cuda", "hip", "opencl", "cpu", "ref" (case-insensitive), or NULL / "auto":
 *            then the environment variable DISTIL_BACKEND if set, else the highest-priority
 *            backend that has a device. A backend asked for by name (argument or environment)
 *            that is not compiled in or has no device gives DISTIL_ERR_NOT_AVAILABLE: there is
 *            no silent fallback.
 *   device   device index within the backend, or -1 for DISTIL_DEVICE (default 0).
 * On failure *out is NULL and the message is in distil_ctx_last_error(NULL).
 * Returns DISTIL_OK, DISTIL_ERR_INVALID_ARG, DISTIL_ERR_NOT_AVAILABLE, DISTIL_ERR_OUT_OF_MEMORY,
 * DISTIL_ERR_BACKEND.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_ctx_create(distil_ctx **out, const char *backend,
                                                            int device);

/* Destroy a context and everything it allocated internally. NULL is a no-op. */
DISTIL_API void distil_ctx_destroy(distil_ctx *ctx);

/* Name of the context's backend ("cuda", ...); never NULL ("" for a NULL ctx). */
DISTIL_API const char *distil_ctx_backend_name(const distil_ctx *ctx);

/* Human-readable name of the context's device (e.g. "NVIDIA H200"); never NULL. */
DISTIL_API const char *distil_ctx_device_name(const distil_ctx *ctx);

/*
 * The message of the last failed call on ctx ("" when none failed yet). With ctx == NULL: the
 * message of the last failed call that had no context (distil_ctx_create,
 * distil_backend_device_count, distil_divergence_from_name) on this thread. Valid until the next
 * call on the same context.
 */
DISTIL_API const char *distil_ctx_last_error(const distil_ctx *ctx);

/*
 * The context's own stream, as a value for distil_ctx_set_stream: a non-blocking stream (cuda,
 * hip) or in-order queue (opencl) that the context creates and owns. A new context starts on it.
 * Pinned forever; it is no valid handle of any vendor runtime.
 */
#define DISTIL_STREAM_OWN ((void *)(intptr_t)-1)

/*
 * Bind the stream that later calls enqueue on: a cudaStream_t, hipStream_t or
 * cl_command_queue (of the context's device), cast to void *. Every stream of the runtime can be
 * bound, its special handles included: on cuda / hip, NULL is the default stream (the legacy
 * default stream, handle 0, which is where PyTorch works unless told otherwise), and
 * cudaStreamLegacy / cudaStreamPerThread (hipStreamPerThread) are bound as they are.
 * DISTIL_STREAM_OWN binds the context's own stream again. OpenCL has no default queue: there
 * NULL means the context's own queue, like DISTIL_STREAM_OWN. The cpu and ref backends accept
 * only NULL and DISTIL_STREAM_OWN (DISTIL_ERR_UNSUPPORTED otherwise). The caller keeps ownership
 * and must keep a bound stream alive while the context uses it. A call is ordered on the bound
 * stream as a whole: what it runs on internal streams (the cuda / hip fused loss) waits for the
 * stream's earlier work and is joined back into it by events before the call returns, so the
 * stream can be captured into a graph.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_ctx_set_stream(distil_ctx *ctx, void *stream);

/*
 * Wait until all work enqueued by this context has finished, then report deferred errors:
 * DISTIL_ERR_INVALID_LABEL (with the first bad row in the message) or DISTIL_ERR_BACKEND for an
 * asynchronous device fault. A deferred error is reported once.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_ctx_synchronize(distil_ctx *ctx);

/*
 * Lend the context a workspace of `bytes` in its backend's memory (a framework's allocator,
 * say). Later calls take their scratch memory from it instead of allocating; a call that needs
 * more returns DISTIL_ERR_WORKSPACE (see the *_workspace_size queries). ptr == NULL with
 * bytes == 0 returns to the context's own, lazily grown workspace. The library never frees a
 * lent workspace; it must stay valid until unset or the context is destroyed.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_ctx_set_workspace(distil_ctx *ctx, void *ptr,
                                                                   size_t bytes);

/* ---------------------------------------------------------------- memory */

/*
 * Memory in the context's address space, so that one program runs on every backend.
 * distil_malloc returns a device pointer (cuda/hip), a cl_mem (opencl) or host memory (cpu/ref),
 * aligned to at least 256 bytes; bytes == 0 gives NULL and DISTIL_OK. distil_free(ctx, NULL) is a
 * no-op. The copies are synchronous with respect to the host: they wait for the context's
 * stream, and the host buffer may be reused when they return.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_malloc(distil_ctx *ctx, size_t bytes, void **ptr);
DISTIL_API void distil_free(distil_ctx *ctx, void *ptr);
DISTIL_API DISTIL_NODISCARD distil_status distil_memcpy_to_device(distil_ctx *ctx, void *dst,
                                                                  const void *src_host,
                                                                  size_t bytes);
DISTIL_API DISTIL_NODISCARD distil_status distil_memcpy_to_host(distil_ctx *ctx, void *dst_host,
                                                                const void *src, size_t bytes);

/* ---------------------------------------------------------------- JSD */

typedef enum distil_reduction {
    DISTIL_REDUCTION_BATCHMEAN = 0, /* sum of row losses / N, N = rows whose label != ignore */
    DISTIL_REDUCTION_SUM = 1,       /* sum of row losses */
    DISTIL_REDUCTION_NONE = 2,      /* one loss per row, [rows] fp32; ignored rows hold 0 */
} distil_reduction;

/* Which divergence a loss's soft part computes (docs/SPEC.md §6); x = log q (student),
 * y = log p (teacher). The numbers are pinned forever. */
typedef enum distil_divergence {
    DISTIL_DIVERGENCE_JSD = 0,             /* generalised JSD(beta), docs/SPEC.md §1 (default) */
    DISTIL_DIVERGENCE_FORWARD_KL = 1,      /* KL(p || q) */
    DISTIL_DIVERGENCE_REVERSE_KL = 2,      /* KL(q || p) */
    DISTIL_DIVERGENCE_SKEW_KL = 3,         /* KL(p || alpha p + (1 - alpha) q) */
    DISTIL_DIVERGENCE_SKEW_REVERSE_KL = 4, /* KL(q || (1 - alpha) p + alpha q) */
    DISTIL_DIVERGENCE_TVD = 5,             /* total variation, 1/2 sum |p - q| */
} distil_divergence;

/*
 * The name of a divergence: its enum name in lower case ("jsd", "forward_kl", "reverse_kl",
 * "skew_kl", "skew_reverse_kl", "tvd"), the word the Python package and distil-bench take; a
 * static string. NULL for a value that is no divergence of this library, so that the names of
 * 0, 1, ... up to the first NULL are every divergence it has.
 */
DISTIL_API const char *distil_divergence_name(distil_divergence divergence);

/*
 * The divergence whose distil_divergence_name is `name` (exactly, case included) into
 * *divergence. Returns DISTIL_OK, or DISTIL_ERR_INVALID_ARG for a NULL argument or a name that
 * is none of them, leaving *divergence as it was; the message, in distil_ctx_last_error(NULL),
 * names the argument (and lists the names).
 */
DISTIL_API DISTIL_NODISCARD distil_status
distil_divergence_from_name(const char *name, distil_divergence *divergence);

/* Descriptor of distil_jsd. Always fill it with distil_jsd_desc_init() first. */
typedef struct distil_jsd_desc {
    size_t struct_size;           /* set by _init; lets the library reject a mismatched header */
    int64_t rows;                 /* T >= 0 */
    int64_t vocab;                /* V >= 1 */
    int64_t student_stride;       /* row stride of student_logp, elements; 0 = vocab */
    int64_t teacher_stride;       /* row stride of teacher_logp, elements; 0 = vocab */
    int64_t grad_stride;          /* row stride of grad_student; 0 = vocab */
    distil_dtype dtype;           /* of student_logp, teacher_logp and grad (default F32) */
    float beta;                   /* in [0, 1], weight of the teacher; 0: KL(p||q), 1: KL(q||p) */
    int64_t ignore_index;         /* rows whose label equals it are ignored (default -100) */
    distil_reduction reduction;   /* default BATCHMEAN */
    float grad_scale;             /* the gradient written is grad_scale * dloss/dx (default 1) */
    distil_divergence divergence; /* default JSD (uses beta); SKEW_* use alpha */
    float alpha;                  /* skew in [0, 1] of the SKEW_* divergences (default 0.1) */
    /* The batchmean normaliser N given by the caller instead of counted (gradient accumulation,
     * tokens across data-parallel ranks): normaliser > 0 as a host value, or normaliser_device,
     * one fp32 in the context's memory read on the device (no host synchronisation; N <= 0 or
     * NaN there: loss and gradient 0). At most one of the two, and only with BATCHMEAN; both
     * 0 / NULL (the default): N is counted. Labels still ignore rows. docs/SPEC.md §6. */
    float normaliser;
    const float *normaliser_device;
} distil_jsd_desc;

DISTIL_API void distil_jsd_desc_init(distil_jsd_desc *desc);

/*
 * Generalised JSD between student and teacher log-probabilities, or the divergence of
 * desc.divergence (docs/SPEC.md §6), and its gradient with respect to the student (§1).
 *   student_logp  (rows, vocab), row stride student_stride, dtype       x = log q
 *   teacher_logp  (rows, vocab), row stride teacher_stride, dtype       y = log p
 *   labels        (rows) int64 or NULL (no row ignored)
 *   loss          fp32: 1 value, or (rows) values for DISTIL_REDUCTION_NONE
 *   grad_student  (rows, vocab), row stride grad_stride, dtype, or NULL (loss only). It may be
 *                 student_logp itself (in place) when the strides are equal.
 * batchmean divides loss and gradient by N counted on the device; N == 0 gives loss 0 and a zero
 * gradient. Ignored rows get a zero gradient. rows == 0 writes loss 0 (one value; nothing for
 * DISTIL_REDUCTION_NONE, where loss may then be NULL) and nothing else. Asynchronous on GPU
 * backends. Scratch memory: distil_jsd_workspace_size. Returns DISTIL_OK, DISTIL_ERR_INVALID_ARG,
 * DISTIL_ERR_VERSION, DISTIL_ERR_UNSUPPORTED, DISTIL_ERR_OUT_OF_MEMORY, DISTIL_ERR_WORKSPACE,
 * DISTIL_ERR_BACKEND.
 * docs/SPEC.md §6: desc.normaliser / normaliser_device give batchmean's N instead of counting it.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_jsd(distil_ctx *ctx, const distil_jsd_desc *desc,
                                                     const void *student_logp,
                                                     const void *teacher_logp,
                                                     const int64_t *labels, float *loss,
                                                     void *grad_student);

/* Scratch bytes distil_jsd needs for this descriptor (for distil_ctx_set_workspace). */
DISTIL_API DISTIL_NODISCARD distil_status distil_jsd_workspace_size(distil_ctx *ctx,
                                                                    const distil_jsd_desc *desc,
                                                                    size_t *bytes);

/* ---------------------------------------------------------------- fused linear JSD */

/* How a fused loss's teacher logits are computed (docs/SPEC.md §6, fp8 teacher head). Pinned
 * forever. */
typedef enum distil_head_precision {
    DISTIL_HEAD_PRECISION_DEFAULT = 0,  /* the exact head of docs/SPEC.md §2 step 1 */
    DISTIL_HEAD_PRECISION_FP8_E4M3 = 1, /* e4m3 operands with per-row scales, fp32 logits */
} distil_head_precision;

/* Descriptor of distil_fused_linear_jsd. Always fill it with distil_fused_linear_jsd_desc_init. */
typedef struct distil_fused_linear_jsd_desc {
    size_t struct_size;     /* set by _init */
    int64_t rows;           /* T >= 0 */
    int64_t vocab;          /* V >= 1: rows of the student's head (and the teacher's by default) */
    int64_t student_hidden; /* Hs >= 1 */
    int64_t teacher_hidden; /* Ht >= 1 */
    distil_dtype dtype;     /* of every float input and gradient output (default BF16) */
    float weight_hard;      /* weight of the hard CE, >= 0 (default 0.5) */
    float weight_soft;      /* weight of the soft JSD, >= 0 (default 0.5); not both 0 */
    float beta;             /* JSD beta in [0, 1] (default 0.5) */
    float temperature;      /* tau > 0, finite; divides the logits of the soft part (default 1) */
    int64_t ignore_index;   /* default -100 */
    int64_t chunk_rows;     /* rows per chunk; 0 = chosen from V, the hidden sizes and memory */
    int return_parts;       /* nonzero: loss holds 3 values, see distil_fused_linear_jsd */
    /* Shapes of the heads as the caller holds them, so that a mismatch is caught rather than
     * read out of bounds. 0 = "as above" (the default). */
    int64_t teacher_vocab;         /* rows of Wt; 0 = vocab. Unequal: the loss runs over the common
                                      prefix min(vocab, teacher_vocab), docs/SPEC.md §6 */
    int64_t student_weight_hidden; /* columns of Ws; must equal student_hidden */
    int64_t teacher_weight_hidden; /* columns of Wt; must equal teacher_hidden */
    /* docs/SPEC.md §6: the soft part's divergence, as in distil_jsd_desc. */
    distil_divergence divergence; /* default JSD (uses beta) */
    float alpha;                  /* skew of the SKEW_* divergences (default 0.1) */
    float teacher_temperature; /* > 0: the teacher's own temperature; 0 = temperature (default) */
    int temperature_squared;   /* nonzero: the soft part is multiplied by tau^2 (Hinton); the
                                  parts of return_parts stay without it */
    float normaliser;          /* > 0: N given on the host; 0 = counted (default); labels still
                                  ignore rows, docs/SPEC.md §6 */
    const float *normaliser_device; /* or N as one fp32 in the context's memory, read on the
                                       device (N <= 0 or NaN: loss and gradients 0); NULL = none */
    /* Per head, docs/SPEC.md §6: z <- cap tanh(scale z / cap); cap 0 = no cap (z <- scale z). */
    float student_logit_scale; /* default 1 */
    float student_softcap;     /* default 0 */
    float teacher_logit_scale; /* default 1 */
    float teacher_softcap;     /* default 0 */
    /* Optional outputs, (rows) fp32 in the context's memory: each row's log-sum-exp of the
     * student's and of the teacher's logits (after scale and cap, at temperature 1); ignored rows
     * included. NULL (the default): not written. */
    float *student_lse;
    float *teacher_lse;
    /* docs/SPEC.md §6 "fp8 teacher head": how the teacher's logits xt Wt^T are computed.
     * DEFAULT: as the student's (§2 step 1). FP8_E4M3: xt's rows and Wt's rows rounded to e4m3
     * with a scale per row, multiplied with fp32 accumulation (cuBLASLt fp8 on sm_89+); cuda
     * before sm_89, hip and opencl: DISTIL_ERR_UNSUPPORTED. The student's head is untouched. */
    distil_head_precision teacher_head_precision;
    /* docs/SPEC.md §6 "fp8 teacher head, made once": with FP8_E4M3, the teacher's head as
     * distil_e4m3_head_make rounded it (Vt rows, Ht columns), so that a frozen teacher's head is
     * rounded once rather than in every call (same values, bit for bit); teacher_weight is then
     * not read and may be NULL. 16-byte aligned; its header must name this call's Vt and Ht and
     * the context's backend. NULL (the default): Wt rounded in each call, in the workspace. */
    const void *teacher_weight_e4m3;
    size_t teacher_weight_e4m3_bytes; /* its size, distil_e4m3_head_size(ctx, Vt, Ht, &bytes) */
    /* docs/SPEC.md §6 "Student entropy": optional (rows) fp32 in the context's memory, each valid
     * row's entropy H = -sum_v q_v log q_v of the student's soft-part distribution
     * q = softmax(z' / tau) (after scale and cap, at the student's temperature, over the common
     * prefix), taken in the row pass; ignored rows hold 0. NULL (the default): not written. The
     * vocabulary-parallel loss refuses it (DISTIL_ERR_UNSUPPORTED). */
    float *student_entropy;
    /* Nonzero: grad_student_weight and grad_student_bias are fp32 whatever dtype is (fp32 master
     * weights beside 16-bit activations: the gradient comes straight from the fp32 accumulator,
     * with no rounding to dtype in between). 0 (the default): they are dtype. Unsharded calls
     * only (distil_fused_linear_jsd_tp refuses it). */
    int grad_weight_fp32;
} distil_fused_linear_jsd_desc;

DISTIL_API void distil_fused_linear_jsd_desc_init(distil_fused_linear_jsd_desc *desc);

/*
 * The fused linear distillation loss of docs/SPEC.md §2, chunk by chunk over rows.
 *   student_hidden  xs (rows, Hs)   dense, dtype
 *   student_weight  Ws (V, Hs)      dense, dtype (nn.Linear layout)
 *   student_bias    bs (V) or NULL
 *   teacher_hidden  xt (rows, Ht)   dense, dtype
 *   teacher_weight  Wt (Vt, Ht)     dense, dtype; Vt = teacher_vocab (0: V)
 *   teacher_bias    bt (Vt) or NULL
 *   labels          (rows) int64; ignore_index marks ignored rows. May be NULL when
 *                   weight_hard == 0: then every row counts (N = rows) and the hard part is 0
 *   loss            fp32: 1 value, loss = weight_hard * sum CE / N + weight_soft * sum JSD / N,
 *                   N = max(1, valid rows) or the given normaliser; with return_parts, 3 values:
 *                   loss, sum CE / N, sum JSD / N (JSD: the soft part's divergence; the loss has
 *                   tau^2 weight_soft with temperature_squared, the part not)
 *   grad_student_hidden  (rows, Hs) dtype or NULL
 *   grad_student_weight  (V, Hs) dtype or NULL (accumulated in fp32, written once)
 *   grad_student_bias    (V) dtype or NULL; may be given only with student_bias
 *
 * With Vt != V the loss runs over the common prefix [0, min(V, Vt)) (docs/SPEC.md §6): the
 * student's gradient rows beyond it are 0, the teacher's rows beyond it are never read, and
 * labels must lie in it (else: an invalid label, as below). The head options (scale, softcap,
 * teacher_temperature, the LSE outputs, the student's entropy) are those of the descriptor,
 * docs/SPEC.md §6.
 *
 * Gradient outputs are overwritten, not accumulated into. With every gradient NULL no backward
 * work is done. rows == 0 writes loss 0 (and the parts) and nothing else; row pointers
 * (hidden states, labels) may then be NULL. A label outside [0, V) that is not ignore_index makes
 * its row ignored and is reported as DISTIL_ERR_INVALID_LABEL by the next distil_ctx_synchronize
 * (the cpu and ref backends return it from the call itself, with every output written).
 * Asynchronous on GPU backends. Scratch memory: distil_fused_linear_jsd_workspace_size. Returns
 * DISTIL_OK, DISTIL_ERR_INVALID_ARG, DISTIL_ERR_VERSION, DISTIL_ERR_UNSUPPORTED,
 * DISTIL_ERR_OUT_OF_MEMORY, DISTIL_ERR_WORKSPACE, DISTIL_ERR_BACKEND, DISTIL_ERR_INVALID_LABEL.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_jsd(
    distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc, const void *student_hidden,
    const void *student_weight, const void *student_bias, const void *teacher_hidden,
    const void *teacher_weight, const void *teacher_bias, const int64_t *labels, float *loss,
    void *grad_student_hidden, void *grad_student_weight, void *grad_student_bias);

/*
 * Scratch bytes distil_fused_linear_jsd needs for this descriptor, with the chunk size it would
 * use (for distil_ctx_set_workspace). `want_grads` says whether gradients will be asked for.
 * With a lent workspace and chunk_rows == 0, the call picks the largest chunk that fits.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_jsd_workspace_size(
    distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc, int want_grads, size_t *bytes);

/*
 * A frozen teacher's head, rounded once for the fp8 teacher head (docs/SPEC.md §6): the rows of
 * weight (rows, cols) dtype, dense, in the context's memory, each rounded to e4m3 with its own
 * scale, into head (in the context's memory, 16-byte aligned, `bytes` as distil_e4m3_head_size
 * gives for these rows and cols), in the backend's own form after a header naming the rows, the
 * columns and the backend's form: hand it to fused calls on contexts of the same backend as
 * desc.teacher_weight_e4m3 (each checks the header: a head made for another shape or backend is
 * DISTIL_ERR_INVALID_ARG naming teacher_weight_e4m3, from the call on cpu / ref, from the next
 * distil_ctx_synchronize on cuda / hip). Asynchronous on GPU backends; weight may be freed or
 * changed once the call is ordered before that. DISTIL_ERR_UNSUPPORTED where the backend has no
 * fp8 teacher head (opencl).
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_e4m3_head_size(distil_ctx *ctx, int64_t rows,
                                                                int64_t cols, size_t *bytes);
DISTIL_API DISTIL_NODISCARD distil_status distil_e4m3_head_make(distil_ctx *ctx, distil_dtype dtype,
                                                                const void *weight, int64_t rows,
                                                                int64_t cols, void *head,
                                                                size_t bytes);

/* ---------------------------------------------------------------- cached top-k teacher */

/*
 * Offline distillation from a cached teacher (docs/SPEC.md §7): per row, the teacher's top-k
 * token ids (int32 or int64) and log-probabilities (fp32, bf16 or fp16), computed once and
 * stored; the student is complete over the vocabulary. Two entry points, like the dense losses:
 * distil_topk (student log-probs given, like distil_jsd) and distil_fused_linear_topk (student
 * hidden states and head, chunked, like distil_fused_linear_jsd; the teacher side costs O(T k)).
 * The teacher log-probs are used as given: a teacher temperature is applied when the cache is
 * made. A slot whose id is pad_id is unused (rows with fewer than k entries). A duplicate id
 * within a row, or an id outside [0, vocab) other than pad_id (checked in every row, ignored
 * ones included), makes the row ignored (loss 0, gradient 0; N is still counted from the labels)
 * and is reported as DISTIL_ERR_INVALID_LABEL, with the row, by the next distil_ctx_synchronize
 * (the cpu and ref backends return it from the call itself, with every output written), like an
 * invalid label. k is at most 512 on "opencl" and 1024 on "cuda" / "hip" (UNSUPPORTED beyond).
 */

/* What happens to the teacher's mass outside its top k (docs/SPEC.md §7). Pinned forever. */
typedef enum distil_topk_tail {
    DISTIL_TOPK_TAIL = 0,        /* the tail mass as one more outcome (default) */
    DISTIL_TOPK_RENORMALISE = 1, /* both distributions restricted to the k ids, renormalised */
    DISTIL_TOPK_ZERO = 2,        /* the teacher is p on the k ids and 0 elsewhere */
} distil_topk_tail;

/* Element type of the teacher ids. Pinned forever. */
typedef enum distil_id_dtype {
    DISTIL_IDS_I64 = 0,
    DISTIL_IDS_I32 = 1,
} distil_id_dtype;

/* Descriptor of distil_topk. Always fill it with distil_topk_desc_init() first. */
typedef struct distil_topk_desc {
    size_t struct_size;             /* set by _init */
    int64_t rows;                   /* T >= 0 */
    int64_t vocab;                  /* V >= 1 */
    int64_t k;                      /* teacher entries per row, 1 <= k <= vocab */
    int64_t student_stride;         /* row stride of student_logp, elements; 0 = vocab */
    int64_t grad_stride;            /* row stride of grad_student; 0 = vocab */
    distil_dtype dtype;             /* of student_logp and grad_student (default F32) */
    distil_dtype teacher_dtype;     /* of teacher_logp (default F32) */
    distil_id_dtype id_dtype;       /* of teacher_ids (default I64) */
    int64_t pad_id;                 /* marks an unused slot (default -1) */
    distil_topk_tail tail;          /* default DISTIL_TOPK_TAIL */
    distil_divergence divergence;   /* any (default FORWARD_KL); JSD uses beta, SKEW_* alpha */
    float beta;                     /* JSD beta in [0, 1] (default 0.5) */
    int64_t ignore_index;           /* default -100 */
    distil_reduction reduction;     /* default BATCHMEAN */
    float grad_scale;               /* default 1 */
    float normaliser;               /* > 0: N given on the host; 0 = counted (default) */
    const float *normaliser_device; /* or N as one fp32 in the context's memory; NULL = none */
    float alpha;                    /* skew in [0, 1] of the SKEW_* divergences (default 0.1) */
} distil_topk_desc;

DISTIL_API void distil_topk_desc_init(distil_topk_desc *desc);

/*
 * Divergence between the student's log-probabilities and a cached top-k teacher, and its
 * gradient with respect to the student input (docs/SPEC.md §7; x is a free variable as in
 * distil_jsd: the student's tail is Q_t = sum of exp(x) outside the k ids).
 *   student_logp  (rows, vocab), row stride student_stride, dtype
 *   teacher_ids   (rows, k) dense, id_dtype
 *   teacher_logp  (rows, k) dense, teacher_dtype
 *   labels        (rows) int64 or NULL (no row ignored)
 *   loss          fp32: 1 value, or (rows) values for DISTIL_REDUCTION_NONE
 *   grad_student  (rows, vocab), row stride grad_stride, dtype, or NULL (loss only)
 * Reductions, N, ignored rows and rows == 0 as in distil_jsd. Scratch memory:
 * distil_topk_workspace_size. Returns DISTIL_OK, DISTIL_ERR_INVALID_ARG, DISTIL_ERR_VERSION,
 * DISTIL_ERR_UNSUPPORTED, DISTIL_ERR_OUT_OF_MEMORY, DISTIL_ERR_WORKSPACE, DISTIL_ERR_BACKEND,
 * DISTIL_ERR_INVALID_LABEL.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_topk(distil_ctx *ctx, const distil_topk_desc *desc,
                                                      const void *student_logp,
                                                      const void *teacher_ids,
                                                      const void *teacher_logp,
                                                      const int64_t *labels, float *loss,
                                                      void *grad_student);

DISTIL_API DISTIL_NODISCARD distil_status distil_topk_workspace_size(distil_ctx *ctx,
                                                                     const distil_topk_desc *desc,
                                                                     size_t *bytes);

/* Descriptor of distil_fused_linear_topk. Always fill it with its _init first. */
typedef struct distil_fused_linear_topk_desc {
    size_t struct_size;             /* set by _init */
    int64_t rows;                   /* T >= 0 */
    int64_t vocab;                  /* V >= 1 */
    int64_t student_hidden;         /* Hs >= 1 */
    int64_t k;                      /* teacher entries per row, 1 <= k <= vocab */
    distil_dtype dtype;             /* of hidden, head, bias and gradients (default BF16) */
    distil_dtype teacher_dtype;     /* of teacher_logp (default F32) */
    distil_id_dtype id_dtype;       /* of teacher_ids (default I64) */
    int64_t pad_id;                 /* default -1 */
    distil_topk_tail tail;          /* default DISTIL_TOPK_TAIL */
    distil_divergence divergence;   /* any (default FORWARD_KL); JSD uses beta, SKEW_* alpha */
    float beta;                     /* default 0.5 */
    float weight_hard;              /* >= 0 (default 0.5) */
    float weight_soft;              /* >= 0 (default 0.5); not both 0 */
    float temperature;              /* tau of the student's soft part (default 1) */
    int64_t ignore_index;           /* default -100 */
    distil_reduction reduction;     /* BATCHMEAN (default) or SUM (N = 1) */
    int64_t chunk_rows;             /* 0 = chosen by distil */
    int return_parts;               /* nonzero: loss holds loss, sum CE / N, sum soft / N */
    float normaliser;               /* > 0: N given on the host; 0 = counted (default) */
    const float *normaliser_device; /* or N as one fp32 in the context's memory; NULL = none */
    int64_t student_weight_hidden;  /* columns of Ws; 0 = student_hidden */
    float alpha;                    /* skew in [0, 1] of the SKEW_* divergences (default 0.1) */
} distil_fused_linear_topk_desc;

DISTIL_API void distil_fused_linear_topk_desc_init(distil_fused_linear_topk_desc *desc);

/*
 * The fused loss against a cached top-k teacher (docs/SPEC.md §2 with §7's soft part): student
 * logits zs = xs Ws^T + bs chunk by chunk (never [T, V]), hard CE on zs, soft divergence between
 * softmax(zs / tau) and the teacher's (k + 1) or k outcomes.
 *   student_hidden xs (rows, Hs), student_weight Ws (V, Hs), student_bias bs (V) or NULL: dtype
 *   teacher_ids (rows, k) id_dtype; teacher_logp (rows, k) teacher_dtype
 *   labels (rows) int64; may be NULL when weight_hard == 0
 *   loss, grad_student_hidden / weight / bias as in distil_fused_linear_jsd
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_topk(
    distil_ctx *ctx, const distil_fused_linear_topk_desc *desc, const void *student_hidden,
    const void *student_weight, const void *student_bias, const void *teacher_ids,
    const void *teacher_logp, const int64_t *labels, float *loss, void *grad_student_hidden,
    void *grad_student_weight, void *grad_student_bias);

DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_topk_workspace_size(
    distil_ctx *ctx, const distil_fused_linear_topk_desc *desc, int want_grads, size_t *bytes);

/* ---------------------------------------------------------------- scaling */

/*
 * x (count elements of dtype, dense) *= s, where s is the fp32 value at `scale` in the context's
 * memory: a device scalar, so that autograd's upstream gradient can scale the gradients a loss
 * call wrote without a host synchronisation. When s == 1 exactly nothing is written (the
 * kernel reads s and stops), so the common `loss.backward()` costs no pass over the gradients.
 * Products are rounded once to dtype. Asynchronous on GPU backends. Returns DISTIL_OK,
 * DISTIL_ERR_INVALID_ARG, DISTIL_ERR_BACKEND.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_scale(distil_ctx *ctx, void *x, distil_dtype dtype,
                                                       int64_t count, const float *scale);

/* ---------------------------------------------------------------- vocabulary parallel */

/*
 * Vocabulary-parallel (tensor-parallel) losses, docs/SPEC.md §8. Each rank of a group holds the
 * columns [vocab_offset, vocab_offset + vocab) of the log-prob rows (distil_jsd) or the rows
 * [vocab_offset, vocab_offset + vocab) of both heads (the fused loss) out of vocab_total;
 * desc.vocab is the rank's own width. Every rank gets the same loss; gradients are local to the
 * shard, except grad_student_hidden, which every rank gets whole (summed across the ranks). The
 * statistics that span the vocabulary are all-reduced through a communicator: a small vtable of
 * in-place all-reduces over [rows]-sized vectors in the context's memory, enqueued on the context's
 * stream.
 */
typedef struct distil_comm distil_comm;

/* Element type and operation of one all-reduce. The numbers are pinned forever. */
typedef enum distil_comm_dtype {
    DISTIL_COMM_F32 = 0,
    DISTIL_COMM_F64 = 1,
} distil_comm_dtype;

typedef enum distil_comm_op {
    DISTIL_COMM_SUM = 0,
    DISTIL_COMM_MAX = 1,
} distil_comm_op;

/*
 * A caller's all-reduce: buf holds count elements of dtype in the context's memory (a device
 * pointer, or host memory on cpu / ref); replace them in place by the op over every rank of the
 * group, ordered after the work already enqueued on `stream` (the context's bound stream, as
 * given to distil_ctx_set_stream; NULL on cpu / ref) and before the work enqueued after it. Every
 * rank calls it with the same count, dtype and op in the same order. Return 0 on success; any
 * other value fails the loss call with DISTIL_ERR_BACKEND ("comm: all-reduce callback returned N").
 */
typedef int (*distil_comm_allreduce_fn)(void *user, void *buf, int64_t count,
                                        distil_comm_dtype dtype, distil_comm_op op, void *stream);

/*
 * Communicators. Each one borrows the engine's group: the caller keeps it alive and frees it after
 * distil_comm_destroy. Rank and size are fixed at creation (the engine's own, where it has one).
 *   _callback  any engine: rank in [0, size), size >= 1, fn not NULL; user is passed through.
 *   _mpi       host memory (cpu, ref; opencl through host copies), on an MPI_Comm: mpi_comm points
 *              to the caller's MPI_Comm
 *              (MPI_Init done). DISTIL_ERR_NOT_AVAILABLE when the library was built without MPI
 *              (CMake option DISTIL_MPI).
 *   _nccl      the cuda backend, on the caller's ncclComm_t (RCCL's on hip), cast to void *. NCCL's
 *              functions are looked up in the NCCL library already loaded in the process
 *              (libnccl.so.2 / librccl.so, or the global symbol table); distil never links or
 *              loads it: DISTIL_ERR_NOT_AVAILABLE with a message when it is not loaded.
 * On failure *out is NULL and the message is in distil_ctx_last_error(NULL).
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_comm_create_callback(distil_comm **out, int rank,
                                                                      int size,
                                                                      distil_comm_allreduce_fn fn,
                                                                      void *user);
DISTIL_API DISTIL_NODISCARD distil_status distil_comm_create_mpi(distil_comm **out,
                                                                 const void *mpi_comm);
DISTIL_API DISTIL_NODISCARD distil_status distil_comm_create_nccl(distil_comm **out,
                                                                  void *nccl_comm);
/* NULL is a no-op. The engine's group is not freed. */
DISTIL_API void distil_comm_destroy(distil_comm *comm);
/* The rank in [0, size) and the group's size; -1 for a NULL comm. */
DISTIL_API int distil_comm_rank(const distil_comm *comm);
DISTIL_API int distil_comm_size(const distil_comm *comm);

/* The rank's part of the vocabulary. Always fill it with distil_vocab_shard_init() first. */
typedef struct distil_vocab_shard {
    size_t struct_size;   /* set by _init */
    int64_t vocab_offset; /* v0 >= 0: the first vocabulary entry of this rank's columns / rows */
    int64_t vocab_total;  /* V, the whole vocabulary; v0 + desc.vocab <= V. Labels are in [0, V) */
    /* The group's communicator, or NULL for the split-phase entry points (the caller reduces). */
    distil_comm *comm;
} distil_vocab_shard;

DISTIL_API void distil_vocab_shard_init(distil_vocab_shard *shard);

/*
 * distil_jsd on a vocabulary shard: student_logp, teacher_logp and grad_student are the rank's
 * columns (rows, desc.vocab); labels, loss and reduction as in distil_jsd. The loss (1 value, or
 * rows for NONE) is all-reduced (sum, fp32) through shard->comm: every rank gets the whole loss.
 * The element terms need no statistics across the vocabulary, so distil_jsd itself on a shard
 * is the split-phase form: it writes the rank's share of the loss, and the caller's sum over the
 * ranks is the loss (docs/SPEC.md §8).
 */
DISTIL_API DISTIL_NODISCARD distil_status
distil_jsd_tp(distil_ctx *ctx, const distil_jsd_desc *desc, const distil_vocab_shard *shard,
              const void *student_logp, const void *teacher_logp, const int64_t *labels,
              float *loss, void *grad_student);

/*
 * distil_fused_linear_jsd on a vocabulary shard: student_weight / bias, teacher_weight / bias,
 * grad_student_weight / bias are the rank's rows [v0, v0 + desc.vocab) (desc.vocab of them);
 * hidden states and labels (global ids in [0, vocab_total)) are the whole batch on every rank.
 * Per chunk three all-reduces of [8 chunk] f64 row statistics and, with grad_student_hidden, one
 * of [chunk, Hs] f32 (docs/SPEC.md §8). Needs a backend with the vocabulary-parallel row op (cpu,
 * cuda, hip, opencl with cl_khr_fp64; ref gives DISTIL_ERR_UNSUPPORTED). Returns what
 * distil_fused_linear_jsd returns.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_jsd_tp(
    distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc, const distil_vocab_shard *shard,
    const void *student_hidden, const void *student_weight, const void *student_bias,
    const void *teacher_hidden, const void *teacher_weight, const void *teacher_bias,
    const int64_t *labels, float *loss, void *grad_student_hidden, void *grad_student_weight,
    void *grad_student_bias);

/*
 * The split-phase form of distil_fused_linear_jsd_tp, for frameworks that keep their collectives
 * in their own graph (JAX psum, torch functional collectives). Call it four times with the same
 * arguments and phase 0, 1, 2, 3; shard->comm is not used. stats is (8 rows) f64 in the context's
 * memory, the caller's; between the calls the caller all-reduces over the group:
 *   after phase 0: stats[0, 2 rows)        max
 *   after phase 1: stats[2 rows, 5 rows)   sum
 *   after phase 2: stats[5 rows, 8 rows)   sum
 * Phases 0-2 write only their part of stats; phase 3 writes loss, grad_student_weight / bias and
 * the rank's share of grad_student_hidden (desc.dtype), which the caller sums over the group.
 * Each phase recomputes the chunk's logits (four forward GEMMs in all instead of one). A phase
 * outside [0, 3] is DISTIL_ERR_INVALID_ARG.
 */
DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_jsd_tp_phase(
    distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc, const distil_vocab_shard *shard,
    int phase, double *stats, const void *student_hidden, const void *student_weight,
    const void *student_bias, const void *teacher_hidden, const void *teacher_weight,
    const void *teacher_bias, const int64_t *labels, float *loss, void *grad_student_hidden,
    void *grad_student_weight, void *grad_student_bias);

/* Scratch bytes of distil_fused_linear_jsd_tp (its chunk plan plus the statistics). */
DISTIL_API DISTIL_NODISCARD distil_status distil_fused_linear_jsd_tp_workspace_size(
    distil_ctx *ctx, const distil_fused_linear_jsd_desc *desc, int want_grads, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_H */
