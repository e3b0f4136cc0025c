/*
 * cpu_kern_avx2.c - row kernels for AVX2 + FMA + F16C (8 lanes). Compiled with those flags only;
 * the backend calls this table after __builtin_cpu_supports says the CPU has them.
 */
#define CPU_VW       8
#define CPU_KTABLE   distil_cpu_kernels_avx2
#define CPU_ISA_NAME "avx2"
#include "cpu_kern_impl.h"
