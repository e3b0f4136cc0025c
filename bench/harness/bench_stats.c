/*
 * bench_stats.c - the clock, percentiles, and the host probes of distil-bench: peak RSS and
 * the copy bandwidth of host memory (all cores copying at once), the floor of the cpu backend.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between the closest ranks of the sorted samples. */
double bench_percentile(double *v, int n, double q) {
    if (n <= 0) {
        return 0.0;
    }
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    double pos = q * (double)(n - 1);
    int lo = (int)pos;
    int hi = lo + 1 < n ? lo + 1 : lo;
    double f = pos - (double)lo;
    return v[lo] * (1.0 - f) + v[hi] * f;
}

/* Peak resident set of this process so far (Linux reports ru_maxrss in KiB). */
double bench_max_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        return 0.0;
    }
    return 1024.0 * (double)ru.ru_maxrss;
}

typedef struct bench_copy_job {
    char *dst;
    const char *src;
    size_t bytes;
} bench_copy_job;

static void *bench_copy_thread(void *arg) {
    bench_copy_job *j = arg;
    memcpy(j->dst, j->src, j->bytes);
    return NULL;
}

/* One copy of `bytes` split over n threads; returns seconds, or -1 on failure. */
static double bench_copy_once(char *dst, const char *src, size_t bytes, int n) {
    pthread_t th[64];
    bench_copy_job job[64];
    size_t part = bytes / (size_t)n;
    double t0 = bench_now_s();
    int started = 0;
    for (int i = 0; i < n; i++) {
        job[i] = (bench_copy_job){dst + (size_t)i * part, src + (size_t)i * part, part};
        if (pthread_create(&th[i], NULL, bench_copy_thread, &job[i]) != 0) {
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
    }
    return started == n ? bench_now_s() - t0 : -1.0;
}

/*
 * Copy bandwidth of host memory in TB/s, counting bytes read plus bytes written, as GPU copy
 * bandwidths are quoted: the best of 5 copies of 256 MiB by every online core.
 */
double bench_host_copy_tbs(void) {
    const size_t bytes = (size_t)256 << 20;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : (cpus > 64 ? 64 : (int)cpus);
    char *src = malloc(bytes);
    char *dst = malloc(bytes);
    double best = 0.0;
    if (src != NULL && dst != NULL) {
        memset(src, 1, bytes);
        memset(dst, 2, bytes); /* fault the pages in before timing */
        for (int rep = 0; rep < 5; rep++) {
            double t = bench_copy_once(dst, src, bytes, n);
            if (t > 0.0 && (best == 0.0 || t < best)) {
                best = t;
            }
        }
    }
    free(src);
    free(dst);
    return best > 0.0 ? 2.0 * (double)bytes / best / 1e12 : 0.0;
}
