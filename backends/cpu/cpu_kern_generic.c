/*
 * cpu_kern_generic.c - row kernels for any CPU (4-lane vectors: SSE2 on x86-64, NEON elsewhere).
 * The fallback when the CPU lacks AVX2; also the only table off x86.
 */
#define CPU_VW       4
#define CPU_KTABLE   distil_cpu_kernels_generic
#define CPU_ISA_NAME "generic"
#include "cpu_kern_impl.h"
