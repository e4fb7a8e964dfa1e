/* Clocks and sleeps: monotonicity, sleep lengths, realtime sanity. */
#define _GNU_SOURCE
#include <sys/time.h>
#include <time.h>

#include "common.h"

#ifndef CLOCK_MONOTONIC_RAW
#define CLOCK_MONOTONIC_RAW 4
#endif
#ifndef CLOCK_REALTIME_COARSE
#define CLOCK_REALTIME_COARSE 5
#endif
#ifndef CLOCK_MONOTONIC_COARSE
#define CLOCK_MONOTONIC_COARSE 6
#endif
#ifndef CLOCK_BOOTTIME
#define CLOCK_BOOTTIME 7
#endif

static long long ns(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts) != 0) return -1;
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void) {
  /* Monotonic never goes backwards. */
  long long prev = ns(CLOCK_MONOTONIC), back = 0;
  for (int i = 0; i < 20000; i++) {
    long long t = ns(CLOCK_MONOTONIC);
    if (t < prev) back++;
    prev = t;
  }
  CHECK("CLOCK_MONOTONIC non-decreasing over 20000 reads", back == 0);
  CHECK("CLOCK_MONOTONIC positive", ns(CLOCK_MONOTONIC) > 0);

  /* Realtime is a plausible date and agrees with gettimeofday. */
  long long rt = ns(CLOCK_REALTIME);
  CHECK("CLOCK_REALTIME after 2020-01-01", rt > 1577836800LL * 1000000000LL);
  struct timeval tv;
  CHECK("gettimeofday succeeds", gettimeofday(&tv, NULL) == 0);
  long long tvns = tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL;
  long long diff = tvns - ns(CLOCK_REALTIME);
  if (diff < 0) diff = -diff;
  CHECK("gettimeofday within 1s of CLOCK_REALTIME", diff < 1000000000LL);
  CHECK("tv_usec in range", tv.tv_usec >= 0 && tv.tv_usec < 1000000);

  /* Other clocks exist and are sane. */
  CHECK("CLOCK_MONOTONIC_RAW works", ns(CLOCK_MONOTONIC_RAW) > 0);
  CHECK("CLOCK_MONOTONIC_COARSE works", ns(CLOCK_MONOTONIC_COARSE) > 0);
  CHECK("CLOCK_REALTIME_COARSE works", ns(CLOCK_REALTIME_COARSE) > 1577836800LL * 1000000000LL);
  long long mono = ns(CLOCK_MONOTONIC);
  CHECK("CLOCK_BOOTTIME >= CLOCK_MONOTONIC", ns(CLOCK_BOOTTIME) >= mono);
  struct timespec ts;
  CHECK_ERRNO("clock_gettime bad clock -> EINVAL", clock_gettime((clockid_t)1234, &ts), EINVAL);

  /* CPU-time clocks advance while spinning. */
  long long c0 = ns(CLOCK_PROCESS_CPUTIME_ID), t0 = ns(CLOCK_MONOTONIC);
  volatile unsigned long sink = 0;
  while (ns(CLOCK_MONOTONIC) - t0 < 30 * 1000000LL)
    for (int i = 0; i < 10000; i++) sink += (unsigned long)i;
  long long c1 = ns(CLOCK_PROCESS_CPUTIME_ID);
  CHECK("CLOCK_PROCESS_CPUTIME_ID advances while spinning", c0 >= 0 && c1 > c0);
  CHECK("CLOCK_THREAD_CPUTIME_ID works", ns(CLOCK_THREAD_CPUTIME_ID) > 0);

  /* nanosleep 10ms takes at least 10ms. */
  struct timespec req = {0, 10 * 1000 * 1000};
  t0 = ns(CLOCK_MONOTONIC);
  int rc = nanosleep(&req, NULL);
  long long el = ns(CLOCK_MONOTONIC) - t0;
  CHECK("nanosleep(10ms) returns 0", rc == 0);
  CHECK("nanosleep(10ms) takes >= 10ms", el >= 10 * 1000000LL);
  CHECK("nanosleep(10ms) takes < 5s", el < 5000 * 1000000LL);
  struct timespec bad = {0, 1000000000};
  CHECK_ERRNO("nanosleep tv_nsec=1e9 -> EINVAL", nanosleep(&bad, NULL), EINVAL);
  struct timespec neg = {-1, 0};
  CHECK_ERRNO("nanosleep negative -> EINVAL", nanosleep(&neg, NULL), EINVAL);
  struct timespec zero = {0, 0};
  CHECK("nanosleep(0) returns 0", nanosleep(&zero, NULL) == 0);

  /* clock_nanosleep relative and absolute (returns the error, not -1). */
  t0 = ns(CLOCK_MONOTONIC);
  rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &req, NULL);
  el = ns(CLOCK_MONOTONIC) - t0;
  CHECK("clock_nanosleep relative returns 0", rc == 0);
  CHECK("clock_nanosleep relative takes >= 10ms", el >= 10 * 1000000LL);
  long long target = ns(CLOCK_MONOTONIC) + 15 * 1000000LL;
  struct timespec abs = {(time_t)(target / 1000000000LL), (long)(target % 1000000000LL)};
  rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, NULL);
  CHECK("clock_nanosleep TIMER_ABSTIME returns 0", rc == 0);
  CHECK("clock_nanosleep TIMER_ABSTIME reached the deadline", ns(CLOCK_MONOTONIC) >= target);
  long long rtarget = ns(CLOCK_REALTIME) + 5 * 1000000LL;
  struct timespec rabs = {(time_t)(rtarget / 1000000000LL), (long)(rtarget % 1000000000LL)};
  rc = clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &rabs, NULL);
  CHECK("clock_nanosleep CLOCK_REALTIME TIMER_ABSTIME", rc == 0 && ns(CLOCK_REALTIME) >= rtarget);
  struct timespec past = {1, 0};
  CHECK("clock_nanosleep deadline in the past returns at once",
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, NULL) == 0);
  CHECK("clock_nanosleep bad timespec -> EINVAL", clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL) == EINVAL);
  return finish();
}
