/*
 * bench_main.c - distil-bench: times distil_jsd and distil_fused_linear_jsd on every selected
 * backend over a sweep of tokens T, prints a table (ms, TB/s or TFLOP/s, ratio to the floor,
 * memory) and writes JSON/CSV for bench/run/plot.sh. Exit status: 0 when every point ran, 1 when
 * no backend could run, 2 for bad flags, 3 when some points failed (their rows say why).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "distil_testing.h"

static void bench_list(FILE *f) {
    fprintf(f, "distil %s, backends in priority order:\n", distil_version_string());
    for (int i = 0; i < distil_backend_count(); i++) {
        const char *name = distil_backend_name(i);
        int n = 0;
        distil_ctx *ctx = NULL;
        if (distil_backend_device_count(name, &n) != DISTIL_OK) {
            fprintf(f, "  %-7s no device (%s)\n", name, distil_ctx_last_error(NULL));
            continue;
        }
        if (distil_ctx_create(&ctx, name, -1) == DISTIL_OK) {
            fprintf(f, "  %-7s %d device(s), default: %s\n", name, n, distil_ctx_device_name(ctx));
        } else {
            fprintf(f, "  %-7s %d device(s), context failed: %s\n", name, n,
                    distil_ctx_last_error(NULL));
        }
        distil_ctx_destroy(ctx);
    }
}

/* Every compiled backend with a device except the float64 reference, or check the named ones.
 * Returns 0, or the exit status. */
static int bench_resolve_backends(bench_options *opt) {
    int n = 0;
    if (opt->n_backends == 0) {
        for (int i = 0; i < distil_backend_count() && opt->n_backends < BENCH_MAX_LIST; i++) {
            const char *name = distil_backend_name(i);
            if (strcmp(name, "ref") != 0 && distil_backend_device_count(name, &n) == DISTIL_OK) {
                opt->backends[opt->n_backends++] = name;
            }
        }
        if (opt->n_backends == 0) {
            fprintf(stderr, "distil-bench: no backend has a device (try --list)\n");
            return 1;
        }
        return 0;
    }
    for (int i = 0; i < opt->n_backends; i++) {
        distil_status st = distil_backend_device_count(opt->backends[i], &n);
        if (st != DISTIL_OK) {
            fprintf(stderr, "distil-bench: --backend %s: %s\n", opt->backends[i],
                    distil_ctx_last_error(NULL));
            return st == DISTIL_ERR_INVALID_ARG ? 2 : 1;
        }
    }
    return 0;
}

static void bench_join_command(int argc, char **argv, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && used + 1 < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i > 0 ? " " : "", argv[i]);
        used += w > 0 ? (size_t)w : 0;
    }
}

static int bench_n_modes(const bench_options *opt, bench_mode *modes) {
    int n = 0;
    if (opt->modes & (1 << BENCH_FORWARD)) {
        modes[n++] = BENCH_FORWARD;
    }
    if (opt->modes & (1 << BENCH_FULL)) {
        modes[n++] = BENCH_FULL;
    }
    return n;
}

static int bench_write_files(const bench_options *opt, const bench_result *r, int n, int loud) {
    int rc = 0;
    if (opt->json_path != NULL && bench_write_json(opt->json_path, opt, r, n) != 0 && loud) {
        fprintf(stderr, "distil-bench: cannot write %s\n", opt->json_path);
        rc = 1;
    }
    if (opt->csv_path != NULL && bench_write_csv(opt->csv_path, r, n) != 0 && loud) {
        fprintf(stderr, "distil-bench: cannot write %s\n", opt->csv_path);
        rc = 1;
    }
    return rc;
}

/* The state of a sweep: the results so far and the progress line. */
typedef struct bench_sweep {
    const bench_options *opt;
    bench_result *res;
    int n;
    int total;
    int tty;
    double t0;
    char floors_printed[BENCH_MAX_LIST * 3]; /* per backend and dtype */
} bench_sweep;

static void bench_progress(bench_sweep *sw, const char *backend, const bench_shape *s) {
    if (sw->opt->quiet) {
        return;
    }
    fprintf(stderr, "%s[%d/%d done, %.0fs] %s %s %s T=%lld ...%s", sw->tty ? "\r\033[K" : "", sw->n,
            sw->total, bench_now_s() - sw->t0, backend, bench_workload_name(s->workload),
            distil_dtype_name(s->dtype), (long long)s->rows, sw->tty ? "" : "\n");
    fflush(stderr);
}

static void bench_clear_progress(const bench_sweep *sw) {
    if (!sw->opt->quiet && sw->tty) {
        fprintf(stderr, "\r\033[K");
    }
}

/* Apply the floor to a result, printing the floor's rates the first time they are used. */
static void bench_floor_result(bench_sweep *sw, int backend_index, bench_result *r) {
    bench_floor_for(sw->opt, r->backend, r->device, r->shape.dtype, &r->floor);
    bench_floor_apply(r);
    char *done = &sw->floors_printed[backend_index * 3 + (int)r->shape.dtype];
    if (!*done && r->status == DISTIL_OK) {
        *done = 1;
        printf("# floor of %s %s (%s): copy %.4g TB/s, GEMM %.4g TFLOP/s, from %s\n", r->backend,
               distil_dtype_name(r->shape.dtype), r->device, r->floor.bw_tbs, r->floor.tflops,
               r->floor.source);
    }
}

static void bench_sweep_workload(bench_sweep *sw, int bi, const bench_shape *base,
                                 const int64_t *rows, int n_rows) {
    bench_mode modes[2];
    int n_modes = bench_n_modes(sw->opt, modes);
    const char *backend = sw->opt->backends[bi];
    for (int i = 0; i < n_rows; i++) {
        bench_shape s = *base;
        s.rows = rows[i];
        bench_progress(sw, backend, &s);
        bench_result *r = &sw->res[sw->n];
        bench_run_isolated(sw->opt, backend, &s, modes, n_modes, r);
        bench_clear_progress(sw);
        for (int k = 0; k < n_modes; k++) {
            bench_floor_result(sw, bi, &r[k]);
            bench_print_row(stdout, &r[k]);
        }
        fflush(stdout);
        sw->n += n_modes;
        /* Files are rewritten after every point so that a run cut short keeps what it measured. */
        bench_write_files(sw->opt, sw->res, sw->n, 0);
    }
}

int main(int argc, char **argv) {
    static char command[4096];
    bench_join_command(argc, argv, command, sizeof command);
    bench_options opt;
    int rc = bench_args_parse(argc, argv, &opt);
    if (rc != BENCH_ARGS_RUN) {
        if (rc == BENCH_ARGS_LIST) {
            bench_list(stdout);
        } else {
            bench_args_usage(rc == BENCH_ARGS_HELP ? stdout : stderr, argv[0]);
        }
        return rc == BENCH_ARGS_BAD ? 2 : 0;
    }
    opt.command = command;
    /* A/B runs of the paths tests reach (e.g. fp8=lt: never time the fp8 emulation unknowingly) */
    if (distil_testing_hooks_set(getenv("DISTIL_TEST_HOOKS")) != DISTIL_OK) {
        fprintf(stderr, "distil-bench: DISTIL_TEST_HOOKS: %s\n", distil_ctx_last_error(NULL));
        return 2;
    }
    if ((rc = bench_resolve_backends(&opt)) != 0) {
        return rc;
    }
    bench_mode modes[2];
    int per_backend =
        ((opt.workloads & 1) ? opt.n_jsd_rows : 0) + ((opt.workloads & 2) ? opt.n_fused_rows : 0);
    bench_sweep sw = {.opt = &opt, .tty = isatty(2), .t0 = bench_now_s()};
    sw.total = opt.n_backends * per_backend * bench_n_modes(&opt, modes);
    sw.res = calloc((size_t)sw.total + 1, sizeof *sw.res);
    if (sw.res == NULL) {
        fprintf(stderr, "distil-bench: out of memory\n");
        return 1;
    }
    bench_print_header(stdout);
    for (int b = 0; b < opt.n_backends; b++) {
        if (opt.workloads & (1 << BENCH_JSD)) {
            bench_sweep_workload(&sw, b, &opt.jsd, opt.jsd_rows, opt.n_jsd_rows);
        }
        if (opt.workloads & (1 << BENCH_FUSED)) {
            bench_sweep_workload(&sw, b, &opt.fused, opt.fused_rows, opt.n_fused_rows);
        }
    }
    int failed = 0;
    for (int i = 0; i < sw.n; i++) {
        failed += sw.res[i].status != DISTIL_OK;
    }
    rc = bench_write_files(&opt, sw.res, sw.n, 1);
    free(sw.res);
    return rc != 0 ? 1 : (failed > 0 ? 3 : 0);
}
