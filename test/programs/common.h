/* Shared helpers for the conformance programs in test/programs.
 *
 * Every program prints one line per check, "<name>: ok" or
 * "<name>: FAIL (...)", then "RESULT: PASS" / "RESULT: FAIL", and exits 0
 * only when every check passed.  Output must be deterministic: never print
 * pids, addresses, times or anything else that differs between runs or
 * between native execution and the sandbox; print relations instead.
 *
 * Works with glibc and musl (no <linux/...> headers).
 */
#ifndef SBX_TEST_COMMON_H
#define SBX_TEST_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

#define CHECK(name, cond)                                                   \
  do {                                                                      \
    if (cond) {                                                             \
      printf("%s: ok\n", (name));                                           \
    } else {                                                                \
      printf("%s: FAIL (%s:%d: %s)\n", (name), __FILE__, __LINE__, #cond); \
      g_failures++;                                                         \
    }                                                                       \
  } while (0)

/* ret must be -1 with errno == want. */
#define CHECK_ERRNO(name, ret, want)                                         \
  do {                                                                       \
    long _r = (long)(ret);                                                   \
    int _e = errno;                                                          \
    if (_r == -1 && _e == (want)) {                                          \
      printf("%s: ok (%s)\n", (name), #want);                                \
    } else {                                                                 \
      printf("%s: FAIL (%s:%d: ret=%ld errno=%d, want -1/%s)\n", (name),     \
             __FILE__, __LINE__, _r, _r == -1 ? _e : 0, #want);              \
      g_failures++;                                                          \
    }                                                                        \
  } while (0)

static inline int finish(void) {
  printf("RESULT: %s\n", g_failures ? "FAIL" : "PASS");
  fflush(stdout);
  return g_failures ? 1 : 0;
}

#endif
