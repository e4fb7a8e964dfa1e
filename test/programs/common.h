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

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* A UDP socket of `family` (AF_INET or AF_INET6) bound to the loopback
 * address and a port of the kernel's choice; its address in *ss, *len.
 * -1 if it cannot be made or bound. */
static inline int bound_udp(int family, struct sockaddr_storage* ss,
                            socklen_t* len) {
  int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  memset(ss, 0, sizeof(*ss));
  if (family == AF_INET) {
    struct sockaddr_in* in = (struct sockaddr_in*)ss;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *len = sizeof(*in);
  } else {
    struct sockaddr_in6* in6 = (struct sockaddr_in6*)ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    *len = sizeof(*in6);
  }
  if (s < 0) return -1;
  if (bind(s, (struct sockaddr*)ss, *len) != 0) {
    close(s);
    return -1;
  }
  *len = sizeof(*ss);
  getsockname(s, (struct sockaddr*)ss, len);
  return s;
}

#endif
