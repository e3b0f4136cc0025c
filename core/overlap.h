/*
 * overlap.h - what one call reads and writes, as byte spans of the backend's memory, and the
 * checks on them (docs/SPEC.md §5): each buffer holds what the descriptor needs, and no output
 * overlaps an input or another output, except one declared in-place pair.
 *
 * A span starts at byte 0 of the pointer the caller gave. Pointer backends (cpu, ref, cuda, hip)
 * resolve a pointer to itself in one address space, size unknown; a handle backend (opencl)
 * resolves a cl_mem to its parent buffer, its origin in it and its size (backend mem_extent).
 */
#ifndef DISTIL_CORE_OVERLAP_H
#define DISTIL_CORE_OVERLAP_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct distil_span {
    const char *name; /* the argument's name, for messages */
    const void *p;    /* as given; NULL: absent */
    size_t bytes;     /* extent from byte 0 that the call touches; 0: nothing */
    bool out;         /* the call writes it */
} distil_span;

/* Bytes of a (rows, cols) tensor of elem-byte elements with row stride ld >= cols (0 rows: 0). */
size_t distil_span_bytes(int64_t rows, int64_t cols, int64_t ld, size_t elem);

/* Where p lies: the backend's mem_extent, else p itself in one address space of unknown size. */
distil_status distil_span_extent(distil_ctx *ctx, const char *fn, const char *name, const void *p,
                                 distil_mem_extent *out);

/*
 * Check the n spans of one call: each is no larger than its buffer (where the size is known),
 * and no output overlaps another span. The pair (in_place_out, in_place_in), indices into s or
 * -1, may coincide exactly (same start; the caller checked their strides): the in-place JSD
 * gradient. Messages name both arguments.
 */
distil_status distil_spans_check(distil_ctx *ctx, const char *fn, const distil_span *s, int n,
                                 int in_place_out, int in_place_in);

/* One pointer argument of a call, for the checks below: its name, where it is, whether the call
 * needs it, the bytes the call touches from it and whether the call writes it. */
typedef struct distil_ptr_rule {
    const char *name;
    distil_dptr p;
    bool required;
    size_t bytes;
    bool out;
} distil_ptr_rule;

/* docs/SPEC.md §5's first two pointer checks over n rules, in this order: NULL where the call
 * needs data, then the backend's ownership of every present pointer. */
distil_status distil_ptr_rules_present(distil_ctx *ctx, const char *fn, const distil_ptr_rule *r,
                                       size_t n);

/* The last check: the n rules' sizes and overlaps, the lent workspace included as an output. */
distil_status distil_ptr_rules_spans(distil_ctx *ctx, const char *fn, const distil_ptr_rule *r,
                                     size_t n);

#endif /* DISTIL_CORE_OVERLAP_H */
