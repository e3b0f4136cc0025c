/*
 * cpu_kern_avx512.c - row kernels for AVX-512 F/DQ/BW/VL (16 lanes). Compiled with those flags
 * only; the backend calls this table after __builtin_cpu_supports says the CPU has them.
 */
#define CPU_VW       16
#define CPU_KTABLE   distil_cpu_kernels_avx512
#define CPU_ISA_NAME "avx512"
#include "cpu_kern_impl.h"
