/*
 * divergence.h - the core's part of docs/SPEC.md §6 shared by both losses: the divergence and
 * alpha checks, the given-normaliser checks, and putting N into its workspace slot (counted, or
 * the caller's host value or device scalar).
 */
#ifndef DISTIL_CORE_DIVERGENCE_H
#define DISTIL_CORE_DIVERGENCE_H

#include "backend.h"

/* divergence one of distil_divergence; alpha in [0, 1] (checked whatever the divergence). */
distil_status distil_check_divergence(distil_ctx *ctx, const char *fn, distil_divergence divergence,
                                      float alpha);

/* normaliser 0 (not given) or finite and > 0 with 1 / normaliser finite in fp32; not given
 * together with normaliser_device. */
distil_status distil_check_normaliser(distil_ctx *ctx, const char *fn, float normaliser,
                                      const float *normaliser_device);

/*
 * N into c->n_out on the stream: count_valid (c) when N is counted; else the caller's host value
 * (fill) or device scalar (a one-element fp32 copy: no host synchronisation). With a given N the
 * labels are still checked (count_valid runs first when c->vocab > 0) but not counted.
 */
distil_status distil_normaliser_put(distil_ctx *ctx, const distil_count_args *c, float normaliser,
                                    distil_dptr normaliser_device);

#endif /* DISTIL_CORE_DIVERGENCE_H */
