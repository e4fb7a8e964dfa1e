/* bench_pingpong: the hand-over between two processes, as systrap does it.
 *
 *   bench_pingpong spin|futex CPU_A CPU_B [N] [PAYLOAD]
 *       (default N = 100000, PAYLOAD = 0 bytes)
 *
 * Two processes (fork) share one MAP_SHARED page and pass an owner word back
 * and forth N times (after N/10 warm-up round trips), with the protocol of
 * platforms/systrap (stub.cc HandOverAndWait, systrap.cc HandToStub /
 * WaitForSentry): the giver stores the owner word (seq_cst) and issues
 * FUTEX_WAKE only if the other side has said it sleeps; the taker waits for
 * the word, spinning or sleeping. Process A runs on CPU_A, B on CPU_B
 * (sched_setaffinity; CPU -1 leaves that process unpinned). Prints
 *   ns_per_roundtrip <float>
 * for A -> B -> A.
 *
 * spin   the taker spins on the word (pause), never sleeps: systrap's
 *        hand-over when the Sentry and the stub each have a core and the
 *        other side answers within the spin window. Only meaningful on two
 *        different CPUs (on one CPU each hand-over waits for a time slice).
 * futex  the taker sleeps at once (FUTEX_WAIT, shared futex): systrap when
 *        the Sentry is confined to one CPU and spinning is disabled. With
 *        CPU_A == CPU_B a round trip is two wakeups and two context switches.
 *
 * PAYLOAD > 0 makes each side also copy PAYLOAD bytes out of the shared
 * page after taking it and back into it before giving it back, like the
 * stub and the Sentry copying a ThreadSlot's registers and xsave image: the
 * difference to PAYLOAD = 0 is the cost of moving those cache lines between
 * cores (plus the local copies). Static, C11. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stub_copy.h"

enum { kOwnerA = 1, kOwnerB = 2 };
enum { kMaxPayload = 64 * 1024 };

/* Same arrangement as ThreadSlot: the owner word and both sleeping flags
 * share one cache line; the payload starts on its own line. */
struct shared {
  _Alignas(64) uint32_t owner;
  uint32_t sleeping[3]; /* indexed by kOwnerA / kOwnerB */
  _Alignas(64) uint8_t payload[kMaxPayload];
};

static int g_spin; /* 1: spin only; 0: sleep at once */
static size_t g_payload;

static long futex(uint32_t *uaddr, int op, uint32_t val) {
  return syscall(SYS_futex, uaddr, op, val, NULL, NULL, 0);
}

/* Gives the page to `to` (the stub's StoreSeqCst + conditional wake). */
static void give(struct shared *s, uint32_t to) {
  __atomic_store_n(&s->owner, to, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&s->sleeping[to], __ATOMIC_SEQ_CST) != 0)
    futex(&s->owner, FUTEX_WAKE, 1);
}

/* Waits until the page is `me`'s. The sleeping flag is set before the last
 * check of the owner word (both seq_cst), so a wakeup cannot be lost. */
static void take(struct shared *s, uint32_t me) {
  if (g_spin) {
    while (__atomic_load_n(&s->owner, __ATOMIC_ACQUIRE) != me) __builtin_ia32_pause();
    return;
  }
  if (__atomic_load_n(&s->owner, __ATOMIC_ACQUIRE) == me) return;
  __atomic_store_n(&s->sleeping[me], 1, __ATOMIC_SEQ_CST);
  uint32_t cur;
  while ((cur = __atomic_load_n(&s->owner, __ATOMIC_SEQ_CST)) != me)
    futex(&s->owner, FUTEX_WAIT, cur);
  __atomic_store_n(&s->sleeping[me], 0, __ATOMIC_SEQ_CST);
}

/* What each side does while it holds the page: the whole payload out and
 * back, like the stub and the Sentry each reading and rewriting the slot. */
static void work(struct shared *s, uint8_t *local) {
  if (g_payload == 0) return;
  stub_copy(local, s->payload, g_payload);
  local[0]++; /* the other side sees a change each time */
  stub_copy(s->payload, local, g_payload);
}

/* Checked before the fork: a process that fails to pin itself later would
 * leave the other waiting for ever. */
static int cpu_allowed(int cpu) {
  cpu_set_t set;
  if (cpu < 0) return 1;
  if (cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_ISSET(cpu, &set);
}

static int pin(int cpu) {
  if (cpu < 0) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    fprintf(stderr, "sched_setaffinity(cpu %d): %s\n", cpu, strerror(errno));
    return -1;
  }
  return 0;
}

static void usage(const char *argv0) {
  fprintf(stderr, "usage: %s spin|futex CPU_A CPU_B [N>0] [PAYLOAD<=%d]\n", argv0,
          kMaxPayload);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    usage(argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "spin") == 0) {
    g_spin = 1;
  } else if (strcmp(argv[1], "futex") != 0) {
    usage(argv[0]);
    return 2;
  }
  int cpu_a = atoi(argv[2]), cpu_b = atoi(argv[3]);
  long n = argc > 4 ? atol(argv[4]) : 100000;
  long payload = argc > 5 ? atol(argv[5]) : 0;
  if (n <= 0 || payload < 0 || payload > kMaxPayload) {
    usage(argv[0]);
    return 2;
  }
  g_payload = (size_t)payload & ~(size_t)7;
  if (g_spin && cpu_a >= 0 && cpu_a == cpu_b) {
    fprintf(stderr, "spin on one CPU only progresses at the end of a time slice; use futex\n");
    return 2;
  }

  if (!cpu_allowed(cpu_a) || !cpu_allowed(cpu_b)) {
    fprintf(stderr, "CPU %d or %d is not available to this process\n", cpu_a, cpu_b);
    return 2;
  }

  struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  s->owner = kOwnerA;
  static uint8_t local[kMaxPayload];
  long total = n / 10 + n;

  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) { /* B: answers every hand-over, then exits */
    if (pin(cpu_b) != 0) _exit(1);
    for (long i = 0; i < total; i++) {
      take(s, kOwnerB);
      work(s, local);
      give(s, kOwnerA);
    }
    _exit(0);
  }

  int rc = 0;
  if (pin(cpu_a) != 0) {
    kill(pid, SIGKILL);
    rc = 1;
  } else {
    struct timespec t0 = {0}, t1;
    for (long i = 0; i < total; i++) {
      if (i == n / 10) clock_gettime(CLOCK_MONOTONIC, &t0);
      work(s, local);
      give(s, kOwnerB);
      take(s, kOwnerA);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("ns_per_roundtrip %.1f\n", ns / (double)n);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    fprintf(stderr, "process B failed (status 0x%x)\n", status);
    rc = 1;
  }
  return rc;
}
