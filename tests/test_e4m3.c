/*
 * test_e4m3.c - the e4m3 rounding of core/backend_api/math/distil_e4m3.h (docs/SPEC.md §6, fp8
 * teacher head): every code decodes to the value of the format's definition and encodes back;
 * the rounding boundaries (ties to even between every pair of neighbours, one fp32 ulp either
 * side, the subnormals, the saturation at 448, inf, NaN, signed zeros); and a sweep over fp32
 * values against an independent nearest-value search in double.
 */
#include "test_util.h"

#include "math/distil_e4m3.h"

#include <math.h>
#include <string.h>

static unsigned int bits_of(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(unsigned int u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static unsigned int enc(float f) {
    return distil_e4m3_from_bits(bits_of(f));
}

static float dec(unsigned int c) {
    return float_of(distil_e4m3_to_bits(c));
}

/* The value of a code from the format's definition (NaN for S.1111.111). */
static double definition(unsigned int c) {
    const int e = (int)((c >> 3) & 15u), m = (int)(c & 7u);
    const double s = (c & 0x80u) ? -1.0 : 1.0;
    if (e == 15 && m == 7) {
        return NAN;
    }
    return s * (e == 0 ? ldexp(m, -9) : ldexp(1.0 + m / 8.0, e - 7));
}

static void test_every_code(void **state) {
    (void)state;
    for (unsigned int c = 0; c < 256; c++) {
        const double want = definition(c);
        const float got = dec(c);
        if (isnan(want)) {
            assert_true(isnan(got));
            assert_int_equal(enc(got), c); /* NaN keeps its sign */
            continue;
        }
        assert_true((double)got == want);
        assert_int_equal(signbit(got) != 0, (c & 0x80u) != 0);
        assert_int_equal(enc(got), c); /* exact values round to themselves, -0 included */
    }
}

/* Positive finite values in increasing order: codes 0x00..0x7e. */
static void test_ties_and_neighbours(void **state) {
    (void)state;
    for (unsigned int c = 0; c < DISTIL_E4M3_MAX_CODE; c++) {
        const float lo = dec(c), hi = dec(c + 1);
        const float mid = (float)(((double)lo + (double)hi) / 2.0); /* exact in fp32 */
        const unsigned int even = (c & 1u) == 0 ? c : c + 1;
        assert_int_equal(enc(mid), even);
        assert_int_equal(enc(-mid), even | 0x80u);
        assert_int_equal(enc(nextafterf(mid, 0.0f)), c);
        assert_int_equal(enc(nextafterf(mid, INFINITY)), c + 1);
    }
}

static void test_special(void **state) {
    (void)state;
    assert_int_equal(enc(448.0f), 0x7e);
    assert_int_equal(enc(464.0f), 0x7e); /* the tie above 448: saturates */
    assert_int_equal(enc(479.0f), 0x7e);
    assert_int_equal(enc(480.0f), 0x7e);
    assert_int_equal(enc(1e30f), 0x7e);
    assert_int_equal(enc(INFINITY), 0x7e);
    assert_int_equal(enc(-INFINITY), 0xfe);
    assert_int_equal(enc(NAN) & 0x7fu, 0x7f);
    assert_int_equal(enc(0.0f), 0x00);
    assert_int_equal(enc(-0.0f), 0x80);
    assert_int_equal(enc(ldexpf(1.0f, -10)), 0x00); /* half the smallest subnormal: tie to 0 */
    assert_int_equal(enc(nextafterf(ldexpf(1.0f, -10), 1.0f)), 0x01);
    assert_int_equal(enc(ldexpf(3.0f, -10)), 0x02);  /* between 1 and 2 x 2^-9: to even */
    assert_int_equal(enc(ldexpf(15.0f, -10)), 0x08); /* 7.5 x 2^-9 rounds to the smallest normal */
    assert_int_equal(enc(1e-30f), 0x00);
    assert_int_equal(enc(float_of(1u)), 0x00); /* the smallest fp32 subnormal */
    assert_int_equal(enc(-1e-30f), 0x80);
    assert_int_equal(enc(1.0f), 0x38);
    assert_int_equal(enc(1.0625f), 0x38); /* tie between 1 and 1.125: to even */
    assert_int_equal(enc(1.1875f), 0x3a); /* tie between 1.125 and 1.25: to even */
}

/* The nearest finite e4m3 to |v| by search (ties: the even code), saturating above 448. */
static unsigned int nearest(double v) {
    unsigned int best = 0;
    for (unsigned int c = 1; c <= DISTIL_E4M3_MAX_CODE; c++) {
        const double d = fabs(definition(c) - v), b = fabs(definition(best) - v);
        if (d < b || (d == b && (c & 1u) == 0)) {
            best = c;
        }
    }
    return best;
}

static void test_sweep(void **state) {
    (void)state;
    /* Every 4099th fp32 from 0 to 2^10 (past the saturation), both signs. */
    for (unsigned int u = 0; u < 0x44800000u; u += 4099u) {
        const float f = float_of(u);
        const unsigned int want = nearest((double)f);
        if (enc(f) != want || enc(-f) != (want | 0x80u)) {
            print_error("e4m3(%a) = 0x%02x, nearest 0x%02x\n", (double)f, enc(f), want);
            fail();
        }
    }
}

/* The row scale and the quantisation of a row (docs/SPEC.md §6). */
static void test_row_scale(void **state) {
    (void)state;
    assert_true(distil_e4m3_row_scale(448.0f) == 1.0f);
    assert_true(distil_e4m3_row_scale(3.0f) == 3.0f / 448.0f);
    assert_true(distil_e4m3_row_scale(0.0f) == 1.0f);
    assert_true(distil_e4m3_row_scale(float_of(1u)) == 1.0f); /* quotient underflows to 0 */
    assert_true(isnan(distil_e4m3_row_scale(INFINITY)));
    assert_true(isnan(distil_e4m3_row_scale(NAN)));
    const float s = distil_e4m3_row_scale(3.0f);
    assert_int_equal(distil_e4m3_quant(3.0f, s), 0x7e); /* the row's amax is 448 */
    assert_int_equal(distil_e4m3_quant(-3.0f, s), 0xfe);
    assert_int_equal(distil_e4m3_quant(0.0f, s), 0x00);
    assert_int_equal(distil_e4m3_quant(1.0f, NAN) & 0x7fu, 0x7f); /* a non-finite row: NaN */
    assert_true(distil_e4m3_value(0x7e) == 448.0f);
}

int main(void) {
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code), cmocka_unit_test(test_ties_and_neighbours),
        cmocka_unit_test(test_special),    cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_row_scale),
    };
    tu_apply_env();
    return cmocka_run_group_tests_name("e4m3", tests, NULL, NULL);
}
