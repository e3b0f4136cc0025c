/* fault.c - see fault.h. The countdown is per thread, so concurrent tests do not interfere. */
#include "fault.h"
#include "distil_testing.h"

static _Thread_local long distil_fault_countdown = -1;

void distil_testing_fail_allocations(long after) {
    distil_fault_countdown = after;
}

bool distil_fault_alloc(void) {
    if (distil_fault_countdown < 0) {
        return false;
    }
    if (distil_fault_countdown == 0) {
        return true; /* keeps failing until reset with -1 */
    }
    distil_fault_countdown--;
    return false;
}
