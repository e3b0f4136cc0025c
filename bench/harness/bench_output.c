/*
 * bench_output.c - what distil-bench writes: the console table, and one record per measured
 * point as JSON (--json) and CSV (--csv). The record's fields are listed once, in
 * bench_fields(), so that both files (and bench/python/baselines.py, which writes the same schema)
 * agree.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

const char *bench_divergence_name(distil_divergence d) {
    const char *name = distil_divergence_name(d);
    return name != NULL ? name : "?";
}

const char *bench_divergence_list(char *buf, size_t n, const char *sep) {
    size_t w = 0;
    buf[0] = '\0';
    for (int d = 0; distil_divergence_name((distil_divergence)d) != NULL && w < n; d++) {
        int k = snprintf(buf + w, n - w, "%s%s", d > 0 ? sep : "",
                         distil_divergence_name((distil_divergence)d));
        w += k > 0 ? (size_t)k : 0;
    }
    return buf;
}

const char *bench_topk_tail_name(distil_topk_tail t) {
    static const char *const names[] = {"tail", "renormalise", "zero"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

const char *bench_workload_name(bench_workload w) {
    return w == BENCH_JSD ? "jsd" : "fused";
}

const char *bench_mode_name(bench_mode m) {
    return m == BENCH_FORWARD ? "forward" : "full";
}

/* One field of a record: a string (s != NULL) or a number (null when not finite). */
typedef void (*bench_field_fn)(void *user, const char *name, const char *s, double num);

static void bench_fields(const bench_result *r, bench_field_fn fn, void *u) {
    const bench_shape *s = &r->shape;
    double sec = r->ms_med * 1e-3;
    int ok = r->status == DISTIL_OK;
    fn(u, "workload", bench_workload_name(s->workload), 0);
    fn(u, "mode", bench_mode_name(r->mode), 0);
    fn(u, "backend", r->backend, 0);
    fn(u, "device", r->device, 0);
    fn(u, "dtype", distil_dtype_name(s->dtype), 0);
    fn(u, "T", NULL, (double)s->rows);
    fn(u, "V", NULL, (double)s->vocab);
    fn(u, "Hs", NULL, s->workload == BENCH_FUSED ? (double)s->hs : NAN);
    fn(u, "Ht", NULL, s->workload == BENCH_FUSED ? (double)s->ht : NAN);
    fn(u, "beta", NULL, s->beta);
    fn(u, "divergence", bench_divergence_name(s->divergence), 0);
    fn(u, "alpha", NULL, s->alpha);
    fn(u, "temperature", NULL, s->workload == BENCH_FUSED ? s->tau : NAN);
    fn(u, "weight_hard", NULL, s->workload == BENCH_FUSED ? s->weight_hard : NAN);
    fn(u, "weight_soft", NULL, s->workload == BENCH_FUSED ? s->weight_soft : NAN);
    fn(u, "chunk_rows", NULL, s->workload == BENCH_FUSED ? (double)s->chunk_rows : NAN);
    fn(u, "topk", NULL, s->workload == BENCH_FUSED ? (double)s->topk_k : NAN);
    fn(u, "teacher_fp8", NULL,
       s->workload == BENCH_FUSED ? (double)(s->teacher_fp8_head ? 2 : s->teacher_fp8) : NAN);
    fn(u, "entropy", NULL, s->workload == BENCH_FUSED ? (double)s->entropy : NAN);
    fn(u, "topk_tail", s->topk_k > 0 ? bench_topk_tail_name(s->topk_tail) : NULL, NAN);
    fn(u, "ignore_frac", NULL, s->ignore_frac);
    fn(u, "status", ok ? "ok" : distil_status_string(r->status), 0);
    fn(u, "message", r->message, 0);
    fn(u, "ms_median", NULL, ok ? r->ms_med : NAN);
    fn(u, "ms_p20", NULL, ok ? r->ms_p20 : NAN);
    fn(u, "ms_p80", NULL, ok ? r->ms_p80 : NAN);
    fn(u, "ms_sync_median", NULL, ok ? r->ms_sync_med : NAN);
    fn(u, "timing", r->timing, 0);
    fn(u, "reps", NULL, r->reps);
    fn(u, "batch", NULL, r->batch);
    fn(u, "sets", NULL, r->sets);
    fn(u, "bytes", NULL, r->bytes);
    fn(u, "flops", NULL, r->flops);
    fn(u, "eff_tbs", NULL, ok && sec > 0 ? r->bytes / sec / 1e12 : NAN);
    fn(u, "eff_tflops", NULL, ok && sec > 0 && r->flops > 0 ? r->flops / sec / 1e12 : NAN);
    fn(u, "floor_ms", NULL, r->floor_ms > 0 ? r->floor_ms : NAN);
    fn(u, "floor_ratio", NULL, ok && r->floor_ms > 0 ? r->ms_med / r->floor_ms : NAN);
    fn(u, "peak_bw_tbs", NULL, r->floor.bw_tbs > 0 ? r->floor.bw_tbs : NAN);
    fn(u, "peak_tflops", NULL, r->floor.tflops > 0 ? r->floor.tflops : NAN);
    fn(u, "floor_source", r->floor.source, 0);
    fn(u, "mem_bytes", NULL, ok ? r->mem_bytes : NAN);
    fn(u, "mem_kind", r->mem_kind, 0);
    fn(u, "working_bytes", NULL, ok ? r->working_bytes : NAN);
    fn(u, "workspace_bytes", NULL, ok ? r->workspace_bytes : NAN);
    fn(u, "loss", NULL, ok ? r->loss : NAN);
}

/* ---------------------------------------------------------------- console */

static const char *bench_size_str(char *buf, size_t n, double bytes) {
    if (!(bytes >= 0.0)) {
        snprintf(buf, n, "-");
    } else if (bytes >= 1e9) {
        snprintf(buf, n, "%.2f GB", bytes / 1e9);
    } else if (bytes >= 1e6) {
        snprintf(buf, n, "%.1f MB", bytes / 1e6);
    } else {
        snprintf(buf, n, "%.0f kB", bytes / 1e3);
    }
    return buf;
}

/* The soft part's divergence and its parameter, and for --topk k and the tail policy:
 * "jsd b=0.5", "skew_kl a=0.1", "forward_kl k=32 tail". */
static const char *bench_soft_str(char *buf, size_t n, const bench_shape *s) {
    int w = snprintf(buf, n, "%s", bench_divergence_name(s->divergence));
    if (s->divergence == DISTIL_DIVERGENCE_JSD) {
        w += snprintf(buf + w, n - (size_t)w, " b=%g", (double)s->beta);
    } else if (s->divergence == DISTIL_DIVERGENCE_SKEW_KL ||
               s->divergence == DISTIL_DIVERGENCE_SKEW_REVERSE_KL) {
        w += snprintf(buf + w, n - (size_t)w, " a=%g", (double)s->alpha);
    }
    if (s->topk_k > 0) {
        snprintf(buf + w, n - (size_t)w, " k=%lld %s", (long long)s->topk_k,
                 bench_topk_tail_name(s->topk_tail));
    }
    return buf;
}

void bench_print_header(FILE *f) {
    fprintf(f, "%-5s %-7s %-7s %-4s %6s %7s %10s %21s %9s %7s %10s %10s %10s  %s\n", "work", "mode",
            "backend", "type", "T", "V", "ms(med)", "[p20 .. p80]", "rate", "xfloor", "memory",
            "working", "workspace", "soft part");
}

void bench_print_row(FILE *f, const bench_result *r) {
    const bench_shape *s = &r->shape;
    const char *name = s->topk_k > 0             ? "topk"
                       : s->teacher_fp8_head > 0 ? "fp8h" /* Wt's rows made once */
                       : s->teacher_fp8 > 0 ? "fp8" /* the fp8 teacher head, docs/SPEC.md §6 */
                       : s->entropy > 0 && s->workload == BENCH_FUSED
                           ? "fent" /* --entropy */
                           : bench_workload_name(s->workload);
    fprintf(f, "%-5s %-7s %-7s %-4s %6lld %7lld ", name, bench_mode_name(r->mode), r->backend,
            distil_dtype_name(s->dtype), (long long)s->rows, (long long)s->vocab);
    if (r->status != DISTIL_OK) {
        fprintf(f, "error: %s\n", r->message);
        return;
    }
    double sec = r->ms_med * 1e-3;
    double rate = r->flops > 0 ? r->flops / sec / 1e12 : r->bytes / sec / 1e12;
    char ratio[16] = "-";
    char m[3][24], soft[64];
    if (r->floor_ms > 0) {
        snprintf(ratio, sizeof ratio, "%.2f", r->ms_med / r->floor_ms);
    }
    fprintf(f, "%10.3f [%8.3f .. %8.3f] %5.2f %-3s %7s %10s %10s %10s  %s\n", r->ms_med, r->ms_p20,
            r->ms_p80, rate, r->flops > 0 ? "TF" : "TB", ratio,
            bench_size_str(m[0], sizeof m[0], r->mem_bytes),
            bench_size_str(m[1], sizeof m[1], r->working_bytes),
            bench_size_str(m[2], sizeof m[2], r->workspace_bytes),
            bench_soft_str(soft, sizeof soft, s));
}

/* ---------------------------------------------------------------- JSON and CSV */

static void bench_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

static void bench_json_number(FILE *f, double v) {
    if (isfinite(v)) {
        fprintf(f, "%.9g", v);
    } else {
        fputs("null", f);
    }
}

typedef struct bench_json_state {
    FILE *f;
    int first;
} bench_json_state;

static void bench_json_field(void *user, const char *name, const char *s, double num) {
    bench_json_state *st = user;
    fprintf(st->f, "%s\"%s\": ", st->first ? "" : ", ", name);
    st->first = 0;
    if (s != NULL) {
        bench_json_string(st->f, s);
    } else {
        bench_json_number(st->f, num);
    }
}

/* The run's context: what produced the numbers, where and when. */
static void bench_json_header(FILE *f, const bench_options *opt) {
    char host[128] = "";
    char date[32] = "";
    time_t now = time(NULL);
    struct tm tmv;
    gethostname(host, sizeof host - 1);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    fprintf(f, "{\n  \"schema\": \"distil-bench/1\",\n  \"tool\": \"distil-bench\",\n");
    fprintf(f, "  \"version\": ");
    bench_json_string(f, distil_version_string());
    fprintf(f, ",\n  \"date\": \"%s\",\n  \"host\": ", date);
    bench_json_string(f, host);
    fprintf(f, ",\n  \"command\": ");
    bench_json_string(f, opt->command != NULL ? opt->command : "");
    fprintf(f,
            ",\n  \"protocol\": {\"warmup\": %d, \"min_reps\": %d, \"max_reps\": %d, "
            "\"min_time_s\": %g, \"cache_mb\": %g, \"max_sets\": %d, \"seed\": %llu},\n",
            opt->warmup, opt->min_reps, opt->max_reps, opt->min_time_s, opt->cache_mb,
            opt->max_sets, (unsigned long long)opt->seed);
}

/* Files are written to PATH.tmp, then renamed: a run interrupted mid-write leaves the last
 * complete file. */
static FILE *bench_open_tmp(const char *path, char *tmp, size_t n) {
    snprintf(tmp, n, "%s.tmp", path);
    return fopen(tmp, "w");
}

static int bench_close_tmp(FILE *f, const char *tmp, const char *path) {
    int rc = fclose(f);
    return rc == 0 && rename(tmp, path) == 0 ? 0 : -1;
}

int bench_write_json(const char *path, const bench_options *opt, const bench_result *r, int n) {
    char tmp[4096];
    FILE *f = bench_open_tmp(path, tmp, sizeof tmp);
    if (f == NULL) {
        return -1;
    }
    bench_json_header(f, opt);
    fprintf(f, "  \"results\": [\n");
    for (int i = 0; i < n; i++) {
        bench_json_state st = {f, 1};
        fprintf(f, "    {");
        bench_fields(&r[i], bench_json_field, &st);
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return bench_close_tmp(f, tmp, path);
}

typedef struct bench_csv_state {
    FILE *f;
    int first;
    int header;
} bench_csv_state;

static void bench_csv_field(void *user, const char *name, const char *s, double num) {
    bench_csv_state *st = user;
    fputs(st->first ? "" : ",", st->f);
    st->first = 0;
    if (st->header) {
        fputs(name, st->f);
    } else if (s != NULL) {
        fputc('"', st->f);
        for (; *s != '\0'; s++) {
            fputs(*s == '"' ? "\"\"" : (char[2]){*s, '\0'}, st->f);
        }
        fputc('"', st->f);
    } else if (isfinite(num)) {
        fprintf(st->f, "%.9g", num);
    }
}

int bench_write_csv(const char *path, const bench_result *r, int n) {
    char tmp[4096];
    FILE *f = bench_open_tmp(path, tmp, sizeof tmp);
    if (f == NULL) {
        return -1;
    }
    static const bench_result names_only; /* the header needs names, not values */
    for (int i = -1; i < n; i++) {        /* row -1 is the header */
        bench_csv_state st = {f, 1, i < 0};
        bench_fields(i < 0 ? &names_only : &r[i], bench_csv_field, &st);
        fputc('\n', f);
    }
    return bench_close_tmp(f, tmp, path);
}
