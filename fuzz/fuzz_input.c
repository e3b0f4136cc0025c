/*
 * fuzz_input.c - reading decisions from the fuzz input: bytes, small counts, descriptor fields
 * biased towards defaults, edge integers and special floats.
 */
#include "fuzz.h"

#include <float.h>
#include <math.h>
#include <string.h>

void fz_in_init(fz_in *in, const uint8_t *data, size_t size) {
    in->p = data;
    in->n = size;
    in->pos = 0;
    /* FNV-1a of the whole input: the same input always gives the same bulk data. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) {
        h = (h ^ data[i]) * 1099511628211ull;
    }
    in->rng = h | 1u;
}

uint8_t fz_byte(fz_in *in) {
    return in->pos < in->n ? in->p[in->pos++] : 0;
}

uint32_t fz_u32(fz_in *in) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        v = v << 8 | fz_byte(in);
    }
    return v;
}

uint64_t fz_u64(fz_in *in) {
    uint64_t hi = fz_u32(in);
    return hi << 32 | fz_u32(in);
}

unsigned fz_pick(fz_in *in, unsigned n) {
    return n ? fz_byte(in) % n : 0;
}

bool fz_bool(fz_in *in) {
    return fz_byte(in) & 1;
}

/* xorshift64*: bulk values only, never a decision. */
static uint64_t fz_next(fz_in *in) {
    in->rng ^= in->rng >> 12;
    in->rng ^= in->rng << 25;
    in->rng ^= in->rng >> 27;
    return in->rng * 2685821657736338717ull;
}

double fz_rand_normal(fz_in *in) {
    double u1 = ((double)(fz_next(in) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(fz_next(in) >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t fz_i64_field(fz_in *in, int64_t dflt, int64_t lo, int64_t hi) {
    static const int64_t edges[] = {
        0,         -1,        1,         INT64_MIN,         INT64_MAX,     INT32_MAX,
        INT32_MIN, 1ll << 31, 1ll << 32, (1ll << 62) - 1,   1ll << 62,     -(1ll << 62),
        1ll << 40, 1ll << 20, 262144,    INT64_MAX / 2 + 1, INT64_MIN + 1, 3};
    unsigned mode = fz_byte(in);
    if (mode < 96) {
        return dflt;
    }
    if (mode < 224) {
        uint64_t span = (uint64_t)(hi - lo) + 1;
        return lo + (int64_t)(fz_u32(in) % span);
    }
    if (mode < 248) {
        return edges[fz_pick(in, (unsigned)(sizeof edges / sizeof edges[0]))];
    }
    if (mode < 252) {
        return hi + 1 + fz_pick(in, 4); /* just past the cap */
    }
    return (int64_t)fz_u64(in);
}

int64_t fz_vocab_cap(fz_in *in) {
    return fz_byte(in) >= 224 ? FZ_MAX_VOCAB : FZ_NARROW_VOCAB;
}

int64_t fz_stride_cap(int64_t vocab) {
    return vocab > FZ_NARROW_VOCAB && vocab <= FZ_MAX_VOCAB ? vocab + 8 : FZ_NARROW_STRIDE;
}

static const float fz_specials[] = {0.0f,     -0.0f,     1.0f,    -1.0f,    0.5f,      1e4f,
                                    -1e4f,    1e-45f,    -1e-45f, 1e-38f,   FLT_MAX,   -FLT_MAX,
                                    INFINITY, -INFINITY, NAN,     -NAN,     88.7f,     -88.7f,
                                    1e30f,    -1e30f,    1e-7f,   65504.0f, -65504.0f, 3e38f};

float fz_special_value(fz_in *in) {
    return fz_specials[fz_pick(in, (unsigned)(sizeof fz_specials / sizeof fz_specials[0]))];
}

float fz_float_field(fz_in *in, float dflt, float lo, float hi) {
    unsigned mode = fz_byte(in);
    if (mode < 112) {
        return dflt;
    }
    if (mode < 208) {
        return lo + (hi - lo) * (float)(fz_u32(in) % 1001u) / 1000.0f;
    }
    if (mode < 236) {
        return fz_special_value(in);
    }
    if (mode < 248) {
        float out[] = {nextafterf(lo, -INFINITY), nextafterf(hi, INFINITY), lo, hi};
        return out[fz_pick(in, 4)];
    }
    uint32_t u = fz_u32(in);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The last divergence the library has (distil_divergence_name up to the first NULL). */
static int64_t fz_last_divergence(void) {
    int64_t d = 0;
    while (distil_divergence_name((distil_divergence)(d + 1)) != NULL) {
        d++;
    }
    return d;
}

void fz_read_divergence(fz_in *in, distil_divergence *div, float *alpha, float *normaliser) {
    *div = (distil_divergence)fz_i64_field(in, DISTIL_DIVERGENCE_JSD, DISTIL_DIVERGENCE_JSD,
                                           fz_last_divergence());
    *alpha = fz_float_field(in, 0.1f, 0.0f, 1.0f);
    *normaliser = fz_byte(in) >= 200 ? fz_float_field(in, 0.0f, 0.0f, 64.0f) : 0.0f;
}

bool fz_bad_divergence(distil_divergence div, float alpha, float normaliser) {
    return distil_divergence_name(div) == NULL || !(alpha >= 0.0f && alpha <= 1.0f) ||
           (normaliser != 0.0f &&
            !(normaliser > 0.0f && isfinite(normaliser) && isfinite(1.0f / normaliser)));
}

long fz_fault_countdown(fz_in *in) {
    unsigned mode = fz_byte(in);
    if (mode < 200) {
        return -1;
    }
    return (long)fz_pick(in, 8);
}
