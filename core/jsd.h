/*
 * jsd.h - the body of distil_jsd (jsd.c) without its guard, which distil_jsd_tp (tp_jsd.c) runs
 * on a shard before its all-reduce.
 */
#ifndef DISTIL_CORE_JSD_H
#define DISTIL_CORE_JSD_H

#include "backend.h"

distil_status distil_jsd_run(distil_ctx *ctx, const distil_jsd_desc *desc, const void *student_logp,
                             const void *teacher_logp, const int64_t *labels, float *loss,
                             void *grad_student);

#endif /* DISTIL_CORE_JSD_H */
