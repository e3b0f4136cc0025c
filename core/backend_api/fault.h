/*
 * fault.h - allocation-failure injection for tests (distil_testing_fail_allocations in the private
 * test interface core/testing/distil_testing.h).
 * Every allocation of device or scratch memory, in the core and in backends, first asks
 * distil_fault_alloc(); when it answers true the allocation must fail as if memory ran out.
 */
#ifndef DISTIL_CORE_FAULT_H
#define DISTIL_CORE_FAULT_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when the calling thread's injected countdown says this allocation fails. */
bool distil_fault_alloc(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTIL_CORE_FAULT_H */
