/*
 * bench_args.c - the command line of distil-bench. Every flag is one row of bench_flags (name,
 * kind, the option field(s) it sets, its range, its help line), so parsing, range checks and
 * the usage text cannot disagree. A bad flag is a usage message and exit status 2.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef enum bench_kind {
    K_INT,
    K_I64,
    K_DBL,
    K_FLT,
    K_STR,
    K_ROWS,     /* list of T: "1024,2048", "256:8192" (doubling) or "256:2048:256" */
    K_DTYPE,    /* f32 | bf16 | f16 */
    K_BACKENDS, /* comma list of backend names, or "all" */
    K_WORKLOAD, /* jsd | fused | all */
    K_MODE,     /* forward | full | all */
    K_TIMING,   /* auto | sync | batch */
    K_DIV,      /* a divergence of docs/SPEC.md §6, by the library's name for it */
    K_TAIL,     /* a tail policy of docs/SPEC.md §7, by bench_topk_tail_name */
    K_SWITCH,   /* no value: sets an int to 1 */
} bench_kind;

#define NONE   ((size_t)-1)
#define OFF(f) offsetof(bench_options, f)

typedef struct bench_flag {
    const char *name;
    bench_kind kind;
    size_t off;  /* field of bench_options */
    size_t off2; /* a second field set to the same value (jsd and fused), or NONE */
    double lo;
    double hi;
    const char *help;
} bench_flag;

static const bench_flag bench_flags[] = {
    {"backend", K_BACKENDS, OFF(backends), NONE, 0, 0,
     "LIST  backends to time, e.g. cuda,opencl (default: all with a device, except ref)"},
    {"device", K_INT, OFF(device), NONE, -1, 1e6,
     "N     device index (default -1: DISTIL_DEVICE or 0)"},
    {"preset", K_STR, OFF(preset), NONE, 0, 0,
     "P     gpu | cpu | auto: the seed workloads, or scaled-down ones for a CPU (default auto)"},
    {"workload", K_WORKLOAD, OFF(workloads), NONE, 0, 0, "W     jsd | fused | all (default all)"},
    {"mode", K_MODE, OFF(modes), NONE, 0, 0, "M     forward | full | all (default all)"},
    {"T", K_ROWS, OFF(jsd_rows), OFF(fused_rows), 1, 1e9,
     "LIST  tokens of both workloads: 1024,4096 | 1024:8192 (doubling) | 256:2048:256"},
    {"jsd-T", K_ROWS, OFF(jsd_rows), NONE, 1, 1e9, "LIST  tokens of the jsd workload"},
    {"fused-T", K_ROWS, OFF(fused_rows), NONE, 1, 1e9, "LIST  tokens of the fused workload"},
    {"V", K_I64, OFF(jsd.vocab), OFF(fused.vocab), 1, 1e9, "N     vocabulary of both workloads"},
    {"jsd-V", K_I64, OFF(jsd.vocab), NONE, 1, 1e9, "N     vocabulary of the jsd workload"},
    {"fused-V", K_I64, OFF(fused.vocab), NONE, 1, 1e9, "N     vocabulary of the fused workload"},
    {"Hs", K_I64, OFF(fused.hs), NONE, 1, 1e6, "N     student hidden size"},
    {"Ht", K_I64, OFF(fused.ht), NONE, 1, 1e6, "N     teacher hidden size"},
    {"dtype", K_DTYPE, OFF(jsd.dtype), OFF(fused.dtype), 0, 0,
     "D     f32 | bf16 | f16, both workloads"},
    {"jsd-dtype", K_DTYPE, OFF(jsd.dtype), NONE, 0, 0,
     "D     dtype of the jsd workload (default f32)"},
    {"fused-dtype", K_DTYPE, OFF(fused.dtype), NONE, 0, 0,
     "D     dtype of the fused workload (gpu default bf16, cpu f32)"},
    {"beta", K_FLT, OFF(jsd.beta), OFF(fused.beta), 0, 1, "F     JSD beta in [0, 1] (default 0.5)"},
    {"divergence", K_DIV, OFF(jsd.divergence), OFF(fused.divergence), 0, 0,
     "NAME  a divergence, listed below (default jsd; --topk: forward_kl, "
     "distil_fused_linear_topk's default)"},
    {"alpha", K_FLT, OFF(jsd.alpha), OFF(fused.alpha), 0, 1,
     "F     skew of skew_kl / skew_reverse_kl in [0, 1] (default 0.1)"},
    {"tau", K_FLT, OFF(fused.tau), NONE, 1e-30, 1e30, "F     temperature > 0 (default 1)"},
    {"weight-hard", K_FLT, OFF(fused.weight_hard), NONE, 0, 1e30, "F     CE weight (default 0.5)"},
    {"weight-soft", K_FLT, OFF(fused.weight_soft), NONE, 0, 1e30, "F     JSD weight (default 0.5)"},
    {"chunk", K_I64, OFF(fused.chunk_rows), NONE, 0, 1e9,
     "N     fused chunk rows (default 0: auto)"},
    {"topk", K_I64, OFF(fused.topk_k), NONE, 0, 1e9,
     "K     fused: a cached top-K teacher (distil_fused_linear_topk) instead of the teacher head"},
    {"topk-tail", K_TAIL, OFF(fused.topk_tail), NONE, 0, 0,
     "P     tail | renormalise | zero: the --topk teacher's tail policy (default tail)"},
    {"teacher-vocab", K_I64, OFF(fused.teacher_vocab), NONE, 0, 1e9,
     "N     rows of the teacher's head (fused; default 0: V), docs/SPEC.md §6"},
    {"softcap", K_FLT, OFF(fused.softcap), NONE, 0, 1e30,
     "F     softcap of both heads (fused; default 0: none), docs/SPEC.md §6"},
    {"teacher-fp8", K_SWITCH, OFF(fused.teacher_fp8), NONE, 0, 0,
     "      fused: the fp8 (e4m3) teacher head, docs/SPEC.md §6"},
    {"teacher-fp8-head", K_SWITCH, OFF(fused.teacher_fp8_head), NONE, 0, 0,
     " fused: the fp8 teacher head with Wt's rows made once (distil_e4m3_head_make)"},
    {"entropy", K_SWITCH, OFF(fused.entropy), NONE, 0, 0,
     "      fused: ask for the student's entropy too (student_entropy), docs/SPEC.md §6"},
    {"ignore-frac", K_DBL, OFF(jsd.ignore_frac), OFF(fused.ignore_frac), 0, 1,
     "F     fraction of rows labelled ignore_index (default 0)"},
    {"warmup", K_INT, OFF(warmup), NONE, 0, 1e6, "N     untimed calls first (default 3)"},
    {"reps", K_INT, OFF(min_reps), NONE, 1, 1e6, "N     at least N timed samples (default 10)"},
    {"max-reps", K_INT, OFF(max_reps), NONE, 1, 1e6, "N     at most N samples (default 200)"},
    {"min-time", K_DBL, OFF(min_time_s), NONE, 0, 1e6,
     "S     sample for at least S seconds (default 1)"},
    {"timing", K_TIMING, OFF(timing), NONE, 0, 0,
     "T     auto | sync | batch: one call or N calls between synchronizes (auto: batch on GPUs)"},
    {"batch", K_INT, OFF(batch), NONE, 0, 1e6, "N     calls per batch sample (default 0: ~5 ms)"},
    {"sets", K_INT, OFF(max_sets), NONE, 1, BENCH_MAX_SETS,
     "N     at most N input sets rotated (default 8)"},
    {"cache-mb", K_DBL, OFF(cache_mb), NONE, 0, 1e9,
     "MB    rotate sets until they exceed MB, beyond any last-level cache (default 512)"},
    {"peak-bw-tbs", K_DBL, OFF(peak_bw_tbs), NONE, 0, 1e6,
     "X     copy bandwidth of the floor, TB/s"},
    {"peak-tflops", K_DBL, OFF(peak_tflops), NONE, 0, 1e9, "X     GEMM rate of the floor, TFLOP/s"},
    {"json", K_STR, OFF(json_path), NONE, 0, 0, "FILE  write the results as JSON"},
    {"csv", K_STR, OFF(csv_path), NONE, 0, 0, "FILE  write the results as CSV"},
    {"isolate", K_INT, OFF(isolate), NONE, 0, 1,
     "0|1   host backends: each point in a child process, for its own peak RSS (default 1)"},
    {"seed", K_I64, OFF(seed), NONE, 0, 9e18, "N     seed of the random inputs (default 42)"},
    {"quiet", K_SWITCH, OFF(quiet), NONE, 0, 0, "      no progress line"},
};

#define BENCH_N_FLAGS ((int)(sizeof bench_flags / sizeof bench_flags[0]))

void bench_args_usage(FILE *f, const char *argv0) {
    fprintf(f, "usage: %s [--flag VALUE | --flag=VALUE]...\n", argv0);
    fprintf(f, "Times distil's losses on every backend with a device (see bench/README.md).\n\n");
    fprintf(f, "  --%-12s      list the compiled backends and their devices\n", "list");
    fprintf(f, "  --%-12s      this message\n", "help");
    for (int i = 0; i < BENCH_N_FLAGS; i++) {
        fprintf(f, "  --%-12s %s\n", bench_flags[i].name, bench_flags[i].help);
    }
    char names[512];
    fprintf(f, "\n  divergences: %s\n", bench_divergence_list(names, sizeof names, " | "));
}

_Static_assert(offsetof(bench_options, n_jsd_rows) ==
                   offsetof(bench_options, jsd_rows) + sizeof(int64_t) * BENCH_MAX_LIST,
               "a row list is followed by its count");
_Static_assert(offsetof(bench_options, n_fused_rows) ==
                   offsetof(bench_options, fused_rows) + sizeof(int64_t) * BENCH_MAX_LIST,
               "a row list is followed by its count");
_Static_assert(offsetof(bench_options, n_backends) ==
                   offsetof(bench_options, backends) + sizeof(char *) * BENCH_MAX_LIST,
               "the backend list is followed by its count");

static int bench_bad(const char *flag, const char *value, const char *why) {
    fprintf(stderr, "distil-bench: --%s '%s': %s\n", flag, value, why);
    return -1;
}

static int bench_parse_dbl(const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !isfinite(x) || x < lo || x > hi) {
        return -1;
    }
    *out = x;
    return 0;
}

static int bench_parse_i64(const char *v, double lo, double hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || (double)x < lo || (double)x > hi) {
        return -1;
    }
    *out = (int64_t)x;
    return 0;
}

/* "a,b,c", "lo:hi" (doubling from lo) or "lo:hi:step" into list; count in *n. */
static int bench_parse_rows(const char *v, int64_t *list, int *n) {
    char buf[512];
    int64_t r[3];
    int parts = 0;
    if (strchr(v, ':') == NULL) {
        snprintf(buf, sizeof buf, "%s", v);
        *n = 0;
        for (char *t = strtok(buf, ","); t != NULL; t = strtok(NULL, ",")) {
            if (*n == BENCH_MAX_LIST || bench_parse_i64(t, 1, 1e9, &list[*n]) != 0) {
                return -1;
            }
            (*n)++;
        }
        return *n > 0 ? 0 : -1;
    }
    snprintf(buf, sizeof buf, "%s", v);
    for (char *t = strtok(buf, ":"); t != NULL && parts < 3; t = strtok(NULL, ":")) {
        if (bench_parse_i64(t, 1, 1e9, &r[parts++]) != 0) {
            return -1;
        }
    }
    if (parts < 2 || r[1] < r[0]) {
        return -1;
    }
    *n = 0;
    for (int64_t t = r[0]; t <= r[1]; t = parts == 3 ? t + r[2] : 2 * t) {
        if (*n == BENCH_MAX_LIST) {
            return -1;
        }
        list[(*n)++] = t;
    }
    return 0;
}

/* Index of s in the '|'-separated words of `words`, or -1. */
static int bench_word(const char *s, const char *words) {
    size_t len = strlen(s);
    int i = 0;
    for (const char *w = words; *w != '\0'; i++) {
        const char *bar = strchr(w, '|');
        size_t wl = bar != NULL ? (size_t)(bar - w) : strlen(w);
        if (wl == len && strncmp(w, s, len) == 0) {
            return i;
        }
        w += wl + (bar != NULL);
    }
    return -1;
}

/* "a,b" into the backend list; the names point into v, which is split in place. */
static int bench_parse_backends(char *v, const char **list, int *n) {
    *n = 0;
    if (strcmp(v, "all") == 0) {
        return 0; /* every backend with a device */
    }
    for (char *t = strtok(v, ","); t != NULL; t = strtok(NULL, ",")) {
        if (*n == BENCH_MAX_LIST) {
            return -1;
        }
        list[(*n)++] = t;
    }
    return *n > 0 ? 0 : -1;
}

/* Parse v into the field at `field` as the flag's kind says; 0 or -1. */
static int bench_set_one(const bench_flag *fl, char *v, void *field) {
    double d = 0.0;
    int64_t i = 0;
    int w = 0;
    switch (fl->kind) {
    case K_INT:
        if (bench_parse_i64(v, fl->lo, fl->hi, &i) != 0) {
            return -1;
        }
        *(int *)field = (int)i;
        return 0;
    case K_I64:
        return bench_parse_i64(v, fl->lo, fl->hi, (int64_t *)field);
    case K_DBL:
        return bench_parse_dbl(v, fl->lo, fl->hi, (double *)field);
    case K_FLT:
        if (bench_parse_dbl(v, fl->lo, fl->hi, &d) != 0) {
            return -1;
        }
        *(float *)field = (float)d;
        return 0;
    case K_STR:
        *(const char **)field = v;
        return *v != '\0' ? 0 : -1;
    case K_ROWS:
        return bench_parse_rows(v, (int64_t *)field, (int *)((int64_t *)field + BENCH_MAX_LIST));
    case K_BACKENDS:
        return bench_parse_backends(v, (const char **)field,
                                    (int *)((const char **)field + BENCH_MAX_LIST));
    case K_DTYPE:
        w = bench_word(v, "f32|bf16|f16");
        *(distil_dtype *)field = w == 1 ? DISTIL_BF16 : (w == 2 ? DISTIL_F16 : DISTIL_F32);
        return w >= 0 ? 0 : -1;
    case K_WORKLOAD:
    case K_MODE:
        w = bench_word(v, fl->kind == K_WORKLOAD ? "jsd|fused|all" : "forward|full|all");
        *(int *)field = w == 2 ? 3 : 1 << w;
        return w >= 0 ? 0 : -1;
    case K_TIMING:
        w = bench_word(v, "auto|sync|batch");
        *(bench_timing *)field = (bench_timing)w;
        return w >= 0 ? 0 : -1;
    case K_DIV:
        return distil_divergence_from_name(v, (distil_divergence *)field) == DISTIL_OK ? 0 : -1;
    case K_TAIL:
        w = bench_word(v, "tail|renormalise|zero");
        *(distil_topk_tail *)field = (distil_topk_tail)(w >= 0 ? w : 0);
        return w >= 0 ? 0 : -1;
    case K_SWITCH:
        *(int *)field = 1;
        return 0;
    }
    return -1;
}

static void bench_defaults(bench_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->device = -1;
    opt->workloads = 3;
    opt->modes = 3;
    opt->preset = "auto";
    opt->warmup = 3;
    opt->min_reps = 10;
    opt->max_reps = 200;
    opt->min_time_s = 1.0;
    opt->max_sets = 8;
    opt->cache_mb = 512.0;
    opt->isolate = -1;
    opt->seed = 42;
    bench_shape base = {
        .beta = 0.5f, .tau = 1.0f, .weight_hard = 0.5f, .weight_soft = 0.5f, .alpha = 0.1f};
    opt->jsd = base;
    opt->jsd.workload = BENCH_JSD;
    opt->fused = base;
    opt->fused.workload = BENCH_FUSED;
}

/* The seed workloads of docs/DESIGN.md (gpu), or sweeps scaled to a few CPU cores (cpu). */
static void bench_preset(bench_options *opt, int gpu) {
    static const int64_t gpu_t[] = {1024, 2048, 4096, 8192};
    static const int64_t cpu_jsd_t[] = {64, 128, 256, 512, 1024};
    static const int64_t cpu_fused_t[] = {128, 256, 512, 1024, 2048};
    const int64_t *jt = gpu ? gpu_t : cpu_jsd_t;
    const int64_t *ft = gpu ? gpu_t : cpu_fused_t;
    opt->n_jsd_rows = gpu ? 4 : 5;
    opt->n_fused_rows = gpu ? 4 : 5;
    memcpy(opt->jsd_rows, jt, (size_t)opt->n_jsd_rows * sizeof *jt);
    memcpy(opt->fused_rows, ft, (size_t)opt->n_fused_rows * sizeof *ft);
    opt->jsd.dtype = DISTIL_F32;
    opt->jsd.vocab = 128256;
    opt->fused.dtype = gpu ? DISTIL_BF16 : DISTIL_F32;
    opt->fused.vocab = gpu ? 128256 : 32000;
    opt->fused.hs = gpu ? 2048 : 512;
    opt->fused.ht = gpu ? 4096 : 1024;
}

static const bench_flag *bench_flag_find(const char *name, size_t len) {
    for (int i = 0; i < BENCH_N_FLAGS; i++) {
        if (strlen(bench_flags[i].name) == len && strncmp(bench_flags[i].name, name, len) == 0) {
            return &bench_flags[i];
        }
    }
    return NULL;
}

typedef int (*bench_arg_fn)(const bench_flag *fl, char *value, bench_options *opt);

/* Walk --flag VALUE / --flag=VALUE pairs, calling fn on each. */
static int bench_args_walk(int argc, char **argv, bench_options *opt, bench_arg_fn fn) {
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return BENCH_ARGS_HELP;
        }
        if (strcmp(a, "--list") == 0) {
            return BENCH_ARGS_LIST;
        }
        char *eq = strncmp(a, "--", 2) == 0 ? strchr(a + 2, '=') : NULL;
        size_t len = eq != NULL ? (size_t)(eq - a - 2) : strlen(a) - 2;
        const bench_flag *fl = strncmp(a, "--", 2) == 0 ? bench_flag_find(a + 2, len) : NULL;
        if (fl == NULL) {
            fprintf(stderr, "distil-bench: unknown argument '%s'\n", a);
            return BENCH_ARGS_BAD;
        }
        char *v = eq != NULL ? eq + 1 : NULL;
        if (fl->kind != K_SWITCH && v == NULL) {
            if (i + 1 >= argc) {
                fprintf(stderr, "distil-bench: --%s needs a value\n", fl->name);
                return BENCH_ARGS_BAD;
            }
            v = argv[++i];
        }
        if (fl->kind == K_SWITCH && v != NULL) {
            fprintf(stderr, "distil-bench: --%s takes no value\n", fl->name);
            return BENCH_ARGS_BAD;
        }
        if (fn(fl, v, opt) != 0) {
            return BENCH_ARGS_BAD;
        }
    }
    return BENCH_ARGS_RUN;
}

/* First pass: only what picks the preset (a GPU backend named, or --preset). */
static int bench_gpu_named = 0;

static int bench_pass_preset(const bench_flag *fl, char *v, bench_options *opt) {
    if (strcmp(fl->name, "preset") == 0) {
        opt->preset = v;
    } else if (strcmp(fl->name, "backend") == 0) {
        bench_gpu_named =
            strstr(v, "cuda") != NULL || strstr(v, "hip") != NULL || strstr(v, "opencl") != NULL;
    }
    return 0;
}

static const char *bench_expected(const bench_flag *fl) {
    static char divs[600];
    char names[512];
    switch (fl->kind) {
    case K_ROWS:
        return "expected a list like 1024,2048 or 256:8192 (at most 32 values)";
    case K_DTYPE:
        return "expected f32, bf16 or f16";
    case K_BACKENDS:
        return "expected a list like cuda,opencl or all";
    case K_WORKLOAD:
        return "expected jsd, fused or all";
    case K_MODE:
        return "expected forward, full or all";
    case K_TIMING:
        return "expected auto, sync or batch";
    case K_DIV:
        snprintf(divs, sizeof divs, "expected one of %s",
                 bench_divergence_list(names, sizeof names, ", "));
        return divs;
    case K_TAIL:
        return "expected tail, renormalise or zero";
    case K_STR:
        return "expected a non-empty value";
    default:
        return "out of range or not a number (see --help)";
    }
}

static int bench_pass_set(const bench_flag *fl, char *v, bench_options *opt) {
    char *base = (char *)opt;
    if (bench_set_one(fl, v, base + fl->off) != 0 ||
        (fl->off2 != NONE && bench_set_one(fl, v, base + fl->off2) != 0)) {
        return bench_bad(fl->name, v, bench_expected(fl));
    }
    opt->divergence_given |= fl->kind == K_DIV;
    return 0;
}

/* Whether any GPU backend (cuda, hip, opencl) is compiled in and has a device. */
static int bench_gpu_present(void) {
    for (int i = 0; i < distil_backend_count(); i++) {
        const char *name = distil_backend_name(i);
        int n = 0;
        if (!bench_is_host_backend(name) && distil_backend_device_count(name, &n) == DISTIL_OK) {
            return 1;
        }
    }
    return 0;
}

int bench_args_parse(int argc, char **argv, bench_options *opt) {
    bench_defaults(opt);
    int rc = bench_args_walk(argc, argv, opt, bench_pass_preset);
    if (rc != BENCH_ARGS_RUN) {
        return rc;
    }
    int preset = bench_word(opt->preset, "gpu|cpu|auto");
    if (preset < 0) {
        bench_bad("preset", opt->preset, "expected gpu, cpu or auto");
        return BENCH_ARGS_BAD;
    }
    bench_preset(opt, preset == 0 || (preset == 2 && (bench_gpu_named || bench_gpu_present())));
    rc = bench_args_walk(argc, argv, opt, bench_pass_set);
    if (rc == BENCH_ARGS_RUN && !(opt->fused.weight_hard + opt->fused.weight_soft > 0.0f)) {
        fprintf(stderr, "distil-bench: --weight-hard and --weight-soft are both 0\n");
        rc = BENCH_ARGS_BAD;
    }
    if (!opt->divergence_given && opt->fused.topk_k > 0) {
        opt->fused.divergence = DISTIL_DIVERGENCE_FORWARD_KL; /* the top-k loss's default */
    }
    if (opt->max_reps < opt->min_reps) {
        opt->max_reps = opt->min_reps;
    }
    return rc;
}
