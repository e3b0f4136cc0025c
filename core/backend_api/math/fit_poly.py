#!/usr/bin/env python3
"""fit_poly.py - the fp32 polynomials of distil_elem.h, fitted and checked (numpy only).

distil_elem.h evaluates in float (DE_F64 unset):
  Q(z)   = (atanh(s)/s - 1) / z, z = s^2 in [0, 1/9]        (log1p and h of the series)
  Po(z)  = (sinh(d)/d - 1) / z,  Pe(z) = (cosh(d) - 1) / z,  z = d^2 in [0, 0.69^2]  (expm1 pair)
Each is fitted by iteratively reweighted least squares on Chebyshev nodes (close to the minimax
polynomial of the absolute error) with the fewest coefficients whose fp32 evaluation of the
header's formulas is as accurate as the Taylor polynomials it replaced; this script prints the
coefficients and the measured worst errors in ulp (fp32 arithmetic emulated with numpy float32,
against long double), for the Taylor and the fitted forms.
  usage: python3 core/backend_api/math/fit_poly.py
"""
import numpy as np

F = np.float32


def horner(coef, z):
    p = np.full_like(z, F(coef[0]))
    for c in coef[1:]:
        p = (p * z + F(c)).astype(F)
    return p


def series(t, q):  # de_log1p_h in fp32
    s = (t / (t + F(2))).astype(F)
    z = (s * s).astype(F)
    zq = (z * horner(q, z)).astype(F)
    s2 = (s + s).astype(F)
    return (s2 + s2 * zq).astype(F), (s * (t - (zq + zq))).astype(F)


def expm1_pair(d, po, pe):  # de_expm1_pair in fp32
    z = (d * d).astype(F)
    o = (d + (d * z).astype(F) * horner(po, z)).astype(F)
    v = (z * horner(pe, z)).astype(F)
    return (o + v).astype(F), (v - o).astype(F)


def worst_ulp(v, ref):
    ref = ref.astype(np.float64)
    keep = ref != 0
    unit = np.spacing(np.abs(ref[keep]).astype(F)).astype(np.float64)
    return float(np.max(np.abs(v.astype(np.float64)[keep] - ref[keep]) / unit))


def fit(fn, zmax, n, nodes=4000):
    k = np.arange(nodes)
    z = zmax * (1 - np.cos(np.pi * (k + 0.5) / nodes)) / 2
    target = fn(z)
    a = np.vstack([z ** i for i in range(n)]).T
    w = np.ones_like(z)
    for _ in range(40):
        c, *_ = np.linalg.lstsq(a * w[:, None], target * w, rcond=None)
        e = np.abs(a @ c - target)
        w = w * (1 + e / e.max())
    return list(c[::-1])  # highest power first, as Horner takes them


def q_true(z):
    s = np.sqrt(z.astype(np.longdouble))
    return ((np.arctanh(s) / s - 1) / z).astype(np.float64)


def po_true(z):
    d = np.sqrt(z.astype(np.longdouble))
    return ((np.sinh(d) / d - 1) / z).astype(np.float64)


def pe_true(z):
    d = np.sqrt(z.astype(np.longdouble))
    return ((np.cosh(d) - 1) / z).astype(np.float64)


def main():
    t = np.concatenate([np.linspace(-0.5, 1, 400001), -np.logspace(-8, np.log10(0.5), 20000),
                        np.logspace(-8, 0, 20000)]).astype(F)
    lt = np.log1p(t.astype(np.longdouble))
    taylor_q = [1 / (2 * k + 3) for k in range(7, -1, -1)]
    q = fit(q_true, 1 / 9, 5)
    for name, c in (("Q Taylor, 8 coefficients", taylor_q), ("Q fitted, 5", q)):
        l, h = series(t, c)
        print(f"{name}: log1p {worst_ulp(l, lt):.3f} ulp, h {worst_ulp(h, t - lt):.3f} ulp")
    d = np.concatenate([np.linspace(-0.69, 0.69, 400001), np.logspace(-8, np.log10(0.69), 20000),
                        -np.logspace(-8, np.log10(0.69), 20000)]).astype(F)
    du, dw = np.expm1(d.astype(np.longdouble)), np.expm1(-d.astype(np.longdouble))
    fact = [1.0]
    for k in range(1, 12):
        fact.append(fact[-1] * k)
    taylor = ([1 / fact[k] for k in (9, 7, 5, 3)], [1 / fact[k] for k in (10, 8, 6, 4, 2)])
    fitted = (fit(po_true, 0.69 ** 2, 3), fit(pe_true, 0.69 ** 2, 4))
    for name, (po, pe) in (("expm1 Taylor, 4 + 5", taylor), ("expm1 fitted, 3 + 4", fitted)):
        u, w = expm1_pair(d, po, pe)
        print(f"{name}: expm1(d) {worst_ulp(u, du):.3f} ulp, expm1(-d) {worst_ulp(w, dw):.3f} ulp")
    for name, c in (("Q", q), ("Po", fitted[0]), ("Pe", fitted[1])):
        print(name, ", ".join(f"{v:.10e}" for v in c))


if __name__ == "__main__":
    main()
