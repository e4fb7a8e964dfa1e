/* bench_getpid: cost of one trivial system call.
 *
 *   bench_getpid [N]     (default N = 100000)
 *
 * Issues N raw getpid system calls (`mov $39, %eax; syscall`, no libc
 * wrapper, no vDSO) after N/10 warm-up calls, and prints
 *   ns_per_call <float>
 * measured with CLOCK_MONOTONIC around the timed loop (two clock reads in
 * total, so their cost does not matter). Built static so that it runs
 * unchanged natively, under the sentry and under runsc. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The number is loaded by the instruction right before `syscall`, as libc
 * wrappers do: `mov $39, %eax; syscall` is the site form that the sentry's
 * syscall patching (--systrap-patch=on) rewrites. */
static inline long raw_getpid(void) {
  long ret;
  __asm__ volatile("mov $39, %%eax\n\tsyscall"
                   : "=a"(ret)
                   :
                   : "rcx", "r11", "memory");
  return ret;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  if (n <= 0) {
    fprintf(stderr, "usage: %s [N>0]\n", argv[0]);
    return 2;
  }
  long sink = 0;
  for (long i = 0; i < n / 10; i++) sink += raw_getpid();
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) sink += raw_getpid();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
  printf("ns_per_call %.1f\n", ns / (double)n);
  return sink == 0; /* keeps the loop; getpid is never 0 */
}
