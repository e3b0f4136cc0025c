/*
 * distil_glibc_compat.h - included first into every file of the binary wheel's libdistil
 * (cmake/DistilPortable.cmake). glibc gives a function a new default version when it changes
 * its implementation or moves it (2.29: exp, log, pow with new code; 2.34: the libpthread and
 * libdl functions moved into libc), and a program linked on a newer glibc asks for that
 * version. These directives bind the calls to the versions manylinux_2_28's glibc has, which
 * later glibc keep. The functions that moved also need libpthread.so.0 and libdl.so.2 on an
 * older glibc: DistilPortable.cmake links both (stubs on glibc >= 2.34).
 */
#if defined(__x86_64__) && defined(__linux__)
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
__asm__(".symver exp2,exp2@GLIBC_2.2.5");
__asm__(".symver log2,log2@GLIBC_2.2.5");
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.2.5");
__asm__(".symver pthread_getspecific,pthread_getspecific@GLIBC_2.2.5");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_lock,pthread_mutex_lock@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_unlock,pthread_mutex_unlock@GLIBC_2.2.5");
#endif
