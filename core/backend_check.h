/*
 * backend_check.h - whether a backend's table is complete: every required operation present, and
 * every optional sub-table it gives whole (core/backend_api/backend.h says which members each one
 * needs). The registry refuses a backend that is not.
 */
#ifndef DISTIL_CORE_BACKEND_CHECK_H
#define DISTIL_CORE_BACKEND_CHECK_H

#include "backend.h"

/* The first member that be lacks, as its name in the table ("gemm", "fp8->quant_rows",
 * "tuning.e4m3_bytes"), or NULL when the table is complete. */
const char *distil_backend_lacks(const distil_backend *be);

#endif /* DISTIL_CORE_BACKEND_CHECK_H */
