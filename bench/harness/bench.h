/*
 * bench.h - shared types of distil-bench: the sweep options, one measured point, and the
 * functions of each bench_*.c file. The tool calls only the public API (include/distil.h), so
 * every backend is timed by the same code.
 */
#ifndef DISTIL_BENCH_H
#define DISTIL_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "distil.h"

#define BENCH_MAX_LIST 32 /* entries of a --T or --backend list */
#define BENCH_MAX_SETS 16 /* input sets rotated between calls */

typedef enum bench_workload { BENCH_JSD = 0, BENCH_FUSED = 1 } bench_workload;
typedef enum bench_mode { BENCH_FORWARD = 0, BENCH_FULL = 1 } bench_mode;
typedef enum bench_timing {
    BENCH_TIMING_AUTO = 0,
    BENCH_TIMING_SYNC,
    BENCH_TIMING_BATCH
} bench_timing;

/* Everything that defines the work of one call except the mode. */
typedef struct bench_shape {
    bench_workload workload;
    distil_dtype dtype;
    int64_t rows;  /* T */
    int64_t vocab; /* V */
    int64_t hs;    /* student hidden (fused only) */
    int64_t ht;    /* teacher hidden (fused only) */
    float beta;
    float tau;          /* fused only */
    float weight_hard;  /* fused only */
    float weight_soft;  /* fused only */
    int64_t chunk_rows; /* fused only; 0 = the library's choice */
    double ignore_frac; /* fraction of rows whose label is ignore_index */
    /* docs/SPEC.md §6: the (soft part's) divergence and the skew KLs' alpha */
    distil_divergence divergence;
    float alpha;
    /* fused only: > 0 runs distil_fused_linear_topk against a cached top-k teacher of this k
     * (docs/SPEC.md §7: fp32 log-probs, int64 ids) instead of the teacher head (--topk K) */
    int64_t topk_k;
    distil_topk_tail topk_tail; /* --topk-tail (docs/SPEC.md §7; default tail) */
    /* docs/SPEC.md §6 head options (fused only) */
    int64_t teacher_vocab; /* rows of the teacher's head; 0 = vocab */
    float softcap;         /* both heads' softcap (Gemma 2); 0 = none */
    int teacher_fp8;       /* the fp8 teacher head, docs/SPEC.md §6 (--teacher-fp8) */
    int teacher_fp8_head;  /* ... with Wt's rows made once, outside the timed calls */
    int entropy;           /* fused: the student's entropy asked too, docs/SPEC.md §6 */
} bench_shape;

/* The command line, after defaults and presets. */
typedef struct bench_options {
    const char *backends[BENCH_MAX_LIST]; /* n_backends == 0: every backend with a device */
    int n_backends;
    int device;
    int workloads; /* bit (1 << bench_workload) */
    int modes;     /* bit (1 << bench_mode) */
    int64_t jsd_rows[BENCH_MAX_LIST];
    int n_jsd_rows;
    int64_t fused_rows[BENCH_MAX_LIST];
    int n_fused_rows;
    bench_shape jsd;   /* rows is filled per point */
    bench_shape fused; /* rows is filled per point */
    int warmup;
    int min_reps;
    int max_reps;
    double min_time_s;
    bench_timing timing;
    int batch;          /* calls per sample in batch timing; 0 = auto */
    int max_sets;       /* at most this many input sets */
    double cache_mb;    /* rotate sets until the inputs of all sets exceed this */
    double peak_bw_tbs; /* 0 = default of the device (or a probe on the host) */
    double peak_tflops; /* 0 = default of the device (or a probe on the host) */
    const char *json_path;
    const char *csv_path;
    const char *preset;
    const char *command; /* the command line, for the JSON */
    int isolate;         /* host backends: run each point in a child process; -1 = auto */
    int quiet;
    uint64_t seed;
    int divergence_given; /* --divergence was given (else each loss's own default) */
} bench_options;

/* The rates a time is compared with, and where they came from. */
typedef struct bench_floor {
    double bw_tbs; /* copy bandwidth, bytes read + written; 0 = unknown */
    double tflops; /* GEMM rate for the workload's dtype; 0 = unknown */
    char source[96];
} bench_floor;

/* One measured (backend, shape, mode). */
typedef struct bench_result {
    bench_shape shape;
    bench_mode mode;
    char backend[16];
    char device[96];
    distil_status status;
    char message[200];
    double ms_med; /* the reported time, by the method in `timing` */
    double ms_p20;
    double ms_p80;
    double ms_sync_med; /* median of single calls between two synchronizes */
    const char *timing; /* "host-sync" or "host-batch" */
    int reps;
    int batch;
    int sets;
    double bytes; /* minimum traffic of one call */
    double flops; /* GEMM work of one call */
    bench_floor floor;
    double floor_ms;      /* 0 = no floor known */
    double mem_bytes;     /* peak memory of the point, see mem_kind */
    const char *mem_kind; /* "peak-rss" or "inputs+outputs+workspace" */
    double working_bytes; /* memory beyond inputs and outputs */
    double workspace_bytes;
    double loss;
} bench_result;

/* bench_args.c: bench_args_parse returns one of these */
enum { BENCH_ARGS_RUN = 0, BENCH_ARGS_HELP = 1, BENCH_ARGS_BAD = 2, BENCH_ARGS_LIST = 3 };
int bench_args_parse(int argc, char **argv, bench_options *opt);
void bench_args_usage(FILE *f, const char *argv0);

/* bench_stats.c */
double bench_now_s(void);
double bench_percentile(double *v, int n, double q); /* sorts v; q in [0, 1] */
double bench_host_copy_tbs(void);
double bench_max_rss_bytes(void);

/* bench_inputs.c: random inputs and their upload (see the file for the layout) */
typedef struct bench_buffers bench_buffers;
distil_status bench_buffers_create(distil_ctx *ctx, const bench_shape *s, int want_grads, int sets,
                                   uint64_t seed, bench_buffers **out);
void bench_buffers_destroy(distil_ctx *ctx, bench_buffers *b);
double bench_set_bytes(const bench_shape *s);
double bench_output_bytes(const bench_shape *s, int want_grads);
distil_status bench_call(distil_ctx *ctx, const bench_shape *s, bench_mode mode,
                         const bench_buffers *b, int set);
distil_status bench_read_loss(distil_ctx *ctx, const bench_buffers *b, double *loss);
distil_status bench_workspace_bytes(distil_ctx *ctx, const bench_shape *s, bench_mode mode,
                                    const bench_buffers *b, size_t *bytes);

/* bench_run.c */
int bench_is_host_backend(const char *backend);
void bench_work_of(const bench_shape *s, bench_mode mode, double *bytes, double *flops);
void bench_run_point(const bench_options *opt, const char *backend, const bench_shape *s,
                     const bench_mode *modes, int n_modes, bench_result *out);
void bench_run_isolated(const bench_options *opt, const char *backend, const bench_shape *s,
                        const bench_mode *modes, int n_modes, bench_result *out);

/* bench_floor.c */
void bench_floor_for(const bench_options *opt, const char *backend, const char *device,
                     distil_dtype dtype, bench_floor *out);
void bench_floor_apply(bench_result *r);

/* bench_output.c */
const char *bench_workload_name(bench_workload w);
/* The library's name of a divergence (distil_divergence_name; "?" for none), as --divergence
 * takes it. */
const char *bench_divergence_name(distil_divergence d);
/* Every divergence's name, sep between two, into buf (n bytes, truncated to fit); returns buf. */
const char *bench_divergence_list(char *buf, size_t n, const char *sep);
/* "tail", "renormalise", "zero" (--topk-tail). */
const char *bench_topk_tail_name(distil_topk_tail t);
const char *bench_mode_name(bench_mode m);
void bench_print_header(FILE *f);
void bench_print_row(FILE *f, const bench_result *r);
int bench_write_json(const char *path, const bench_options *opt, const bench_result *r, int n);
int bench_write_csv(const char *path, const bench_result *r, int n);

#endif /* DISTIL_BENCH_H */
