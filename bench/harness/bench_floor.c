/*
 * bench_floor.c - the floor a time is compared with: minimum bytes over the device's copy
 * bandwidth and GEMM flops over its GEMM rate. The rates come from --peak-bw-tbs and
 * --peak-tflops, else from defaults of known devices (H200, measured in docs/DESIGN.md), else on
 * the host from probes: a multi-threaded memcpy, and the cpu backend's own fp32 fused forward at a
 * GEMM-bound shape (T 1024, Hs = Ht 2048, V 8192: its row pass is < 1% of the work there).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* Host probes are run at most once per process. */
static double bench_probe_bw = -1.0;
static double bench_probe_tflops = -1.0;

static double bench_host_gemm_tflops(const bench_options *opt) {
    if (bench_probe_tflops >= 0.0) {
        return bench_probe_tflops;
    }
    bench_options o = *opt;
    o.min_reps = 3;
    o.max_reps = 3;
    o.min_time_s = 0.0;
    o.warmup = 1;
    o.max_sets = 1;
    o.isolate = -1;
    bench_shape s = opt->fused;
    s.dtype = DISTIL_F32;
    s.rows = 1024;
    s.vocab = 8192;
    s.hs = 2048;
    s.ht = 2048;
    s.chunk_rows = 0;
    bench_mode mode = BENCH_FORWARD;
    bench_result r;
    bench_run_isolated(&o, "cpu", &s, &mode, 1, &r);
    int ok = r.status == DISTIL_OK && r.ms_p20 > 0.0;
    bench_probe_tflops = ok ? r.flops / (r.ms_p20 * 1e-3) / 1e12 : 0.0;
    return bench_probe_tflops;
}

static double bench_host_bw_tbs(void) {
    if (bench_probe_bw < 0.0) {
        bench_probe_bw = bench_host_copy_tbs();
    }
    return bench_probe_bw;
}

/* Rates of a device known by name; 0 when unknown. */
static void bench_known_device(const char *device, distil_dtype dtype, bench_floor *f) {
    if (strstr(device, "H200") != NULL) {
        f->bw_tbs = 4.28;
        f->tflops = dtype == DISTIL_F32 ? 67.0 : 790.0; /* fp32: datasheet, non-tensor */
        snprintf(f->source, sizeof f->source, "H200 defaults (docs/DESIGN.md; fp32 datasheet)");
    }
}

void bench_floor_for(const bench_options *opt, const char *backend, const char *device,
                     distil_dtype dtype, bench_floor *out) {
    memset(out, 0, sizeof *out);
    bench_known_device(device, dtype, out);
    int flags_only = opt->peak_bw_tbs > 0.0 && opt->peak_tflops > 0.0; /* no probe needed */
    if (out->bw_tbs == 0.0 && bench_is_host_backend(backend) && !flags_only) {
        out->bw_tbs = bench_host_bw_tbs();
        out->tflops = bench_host_gemm_tflops(opt);
        snprintf(out->source, sizeof out->source, "host probes (memcpy, cpu fp32 fused fwd)");
    }
    if (opt->peak_bw_tbs > 0.0 || opt->peak_tflops > 0.0) {
        out->bw_tbs = opt->peak_bw_tbs > 0.0 ? opt->peak_bw_tbs : out->bw_tbs;
        out->tflops = opt->peak_tflops > 0.0 ? opt->peak_tflops : out->tflops;
        snprintf(out->source, sizeof out->source, "flags");
    }
    if (out->bw_tbs == 0.0 && out->tflops == 0.0) {
        snprintf(out->source, sizeof out->source, "unknown (give --peak-bw-tbs, --peak-tflops)");
    }
}

/* floor_ms = the larger of bytes / bandwidth and flops / rate; 0 when a needed rate is unknown. */
void bench_floor_apply(bench_result *r) {
    double mem = r->floor.bw_tbs > 0.0 ? r->bytes / (r->floor.bw_tbs * 1e12) : 0.0;
    double gemm = r->floor.tflops > 0.0 ? r->flops / (r->floor.tflops * 1e12) : 0.0;
    int known = r->flops > 0.0 ? r->floor.tflops > 0.0 : r->floor.bw_tbs > 0.0;
    r->floor_ms = known ? 1e3 * (mem > gemm ? mem : gemm) : 0.0;
}
