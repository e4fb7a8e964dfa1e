/* bench_clock_gettime: cost of one clock_gettime(CLOCK_MONOTONIC).
 *
 *   bench_clock_gettime [N]     (default N = 1000000)
 *
 * Calls libc's clock_gettime(CLOCK_MONOTONIC) N times after N/10 warm-up
 * calls and prints
 *   ns_per_call <float>
 * from the first and last readings. libc goes through the vDSO when the
 * kernel gives one (AT_SYSINFO_EHDR): natively the host's, under the sentry
 * the Sentry's (sentry/vdso), which needs no trap; under
 * `sentry run --vdso=syscall` every call traps. Static, so that the same
 * binary runs natively, under the sentry and under runsc. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  if (n <= 0) {
    fprintf(stderr, "usage: %s [N>0]\n", argv[0]);
    return 2;
  }
  struct timespec t0, t1, ts;
  long sink = 0;
  for (long i = 0; i < n / 10; i++) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sink += ts.tv_nsec;
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sink += ts.tv_nsec;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
  printf("ns_per_call %.1f\n", ns / (double)n);
  return sink == 42; /* keeps the loop */
}
