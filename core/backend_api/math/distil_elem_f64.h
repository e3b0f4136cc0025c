/*
 * distil_elem_f64.h - distil_elem.h's element terms instantiated in float64 (static inline C
 * functions), for the float64 reference (core/ref/ref_math.c) and the tests' float64 bounds
 * (tests/common/topk_cond.c): one instantiation text, included once per file.
 */
#ifndef DISTIL_ELEM_F64_H
#define DISTIL_ELEM_F64_H

#include <math.h>

#define DE_T            double
#define DE_S            double
#define DE_M            int
#define DE_FN           static inline
#define DE_K(lit)       lit
#define DE_V(s)         (s)
#define DE_SEL(m, a, b) ((m) ? (a) : (b))
#define DE_ABS(a)       fabs(a)
#define DE_EXP(a)       exp(a)
#define DE_F64          1
#include "distil_elem.h"

#endif /* DISTIL_ELEM_F64_H */
