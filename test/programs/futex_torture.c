/* Raw futex(2): wait/wake ping-pong between threads for many iterations,
 * EAGAIN on a value mismatch, ETIMEDOUT, wake counts, REQUEUE and
 * CMP_REQUEUE, bitsets, private futexes, bad addresses. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#ifndef FUTEX_WAIT
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_REQUEUE 3
#define FUTEX_CMP_REQUEUE 4
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_PRIVATE_FLAG 128
#define FUTEX_CLOCK_REALTIME 256
#endif
#ifndef FUTEX_BITSET_MATCH_ANY
#define FUTEX_BITSET_MATCH_ANY 0xffffffff
#endif

static long futex(volatile int *uaddr, int op, int val, const struct timespec *ts, volatile int *uaddr2, int val3) {
  return syscall(SYS_futex, uaddr, op, val, ts, uaddr2, val3);
}
/* REQUEUE/CMP_REQUEUE take nr_requeue in the timeout slot. */
static long futex_requeue(volatile int *uaddr, int op, int nr_wake, int nr_requeue, volatile int *uaddr2, int cmp) {
  return syscall(SYS_futex, uaddr, op, nr_wake, (long)nr_requeue, uaddr2, cmp);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* --- ping-pong ------------------------------------------------------------ */
#define ROUNDS 20000
static volatile int turn; /* whose turn: 0 or 1 */
static long rounds_done[2];

static void *pp(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int i = 0; i < ROUNDS; i++) {
    while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != me) futex(&turn, FUTEX_WAIT, !me, NULL, NULL, 0);
    rounds_done[me]++;
    __atomic_store_n(&turn, !me, __ATOMIC_RELEASE);
    futex(&turn, FUTEX_WAKE, 1, NULL, NULL, 0);
  }
  return NULL;
}

/* Private-flag ping-pong on another word. */
static volatile int pturn;
static long prounds[2];
static void *pp_private(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int i = 0; i < ROUNDS / 4; i++) {
    while (__atomic_load_n(&pturn, __ATOMIC_ACQUIRE) != me)
      futex(&pturn, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, !me, NULL, NULL, 0);
    prounds[me]++;
    __atomic_store_n(&pturn, !me, __ATOMIC_RELEASE);
    futex(&pturn, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
  }
  return NULL;
}

/* --- waiters for the counting tests --------------------------------------- */
#define NWAITERS 4
static volatile int gate;    /* waiters sleep while gate == 0 */
static volatile int parking; /* requeue target used to count sleepers */
static volatile int other;   /* second requeue target */
static int woken;

static void *waiter(void *arg) {
  while (__atomic_load_n(&gate, __ATOMIC_ACQUIRE) == 0) futex(&gate, FUTEX_WAIT, 0, NULL, NULL, 0);
  __atomic_fetch_add(&woken, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* Moves every waiter sleeping on `gate` to `parking` until `n` have been
 * moved; returns how many were moved. This proves they are asleep in the
 * kernel without relying on sleeps. */
static int park_all(int n) {
  int moved = 0;
  double deadline = now_ms() + 20000;
  while (moved < n && now_ms() < deadline) {
    long r = futex_requeue(&gate, FUTEX_REQUEUE, 0, INT_MAX, &parking, 0);
    if (r > 0) moved += (int)r;
    else sleep_ms(1);
  }
  return moved;
}

static void *bitset_waiter(void *arg) {
  while (__atomic_load_n(&gate, __ATOMIC_ACQUIRE) == 0)
    futex(&gate, FUTEX_WAIT_BITSET, 0, NULL, NULL, 0x2);
  return NULL;
}

#define GENS 2000
static volatile int gen;
static volatile int acks;
static void *gen_follower(void *arg) {
  for (int g = 1; g <= GENS; g++) {
    int cur;
    while ((cur = __atomic_load_n(&gen, __ATOMIC_ACQUIRE)) < g) futex(&gen, FUTEX_WAIT, cur, NULL, NULL, 0);
    __atomic_fetch_add(&acks, 1, __ATOMIC_SEQ_CST);
    futex(&acks, FUTEX_WAKE, 1, NULL, NULL, 0);
  }
  return NULL;
}

int main(void) {
  volatile int word = 5;
  struct timespec ts10ms = {0, 10 * 1000 * 1000};

  /* Value mismatch. */
  CHECK_ERRNO("FUTEX_WAIT with wrong value -> EAGAIN", futex(&word, FUTEX_WAIT, 6, NULL, NULL, 0), EAGAIN);
  CHECK_ERRNO("FUTEX_WAIT private wrong value -> EAGAIN",
              futex(&word, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 4, NULL, NULL, 0), EAGAIN);
  /* Timeouts. */
  double t0 = now_ms();
  CHECK_ERRNO("FUTEX_WAIT 10ms timeout -> ETIMEDOUT", futex(&word, FUTEX_WAIT, 5, &ts10ms, NULL, 0), ETIMEDOUT);
  double el = now_ms() - t0;
  CHECK("FUTEX_WAIT timeout took >= 10ms", el >= 9.9);
  CHECK("FUTEX_WAIT timeout took < 5s", el < 5000);
  struct timespec abs;
  clock_gettime(CLOCK_MONOTONIC, &abs);
  abs.tv_nsec += 20 * 1000 * 1000;
  if (abs.tv_nsec >= 1000000000) { abs.tv_sec++; abs.tv_nsec -= 1000000000; }
  t0 = now_ms();
  CHECK_ERRNO("FUTEX_WAIT_BITSET absolute monotonic -> ETIMEDOUT",
              futex(&word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, 5, &abs, NULL, FUTEX_BITSET_MATCH_ANY), ETIMEDOUT);
  CHECK("FUTEX_WAIT_BITSET waited until the deadline", now_ms() - t0 >= 19.9 - 0.1);
  clock_gettime(CLOCK_REALTIME, &abs);
  abs.tv_nsec += 5 * 1000 * 1000;
  if (abs.tv_nsec >= 1000000000) { abs.tv_sec++; abs.tv_nsec -= 1000000000; }
  CHECK_ERRNO("FUTEX_WAIT_BITSET absolute realtime -> ETIMEDOUT",
              futex(&word, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, 5, &abs, NULL, FUTEX_BITSET_MATCH_ANY),
              ETIMEDOUT);
  struct timespec past = {0, 0};
  CHECK_ERRNO("FUTEX_WAIT_BITSET deadline in the past -> ETIMEDOUT",
              futex(&word, FUTEX_WAIT_BITSET, 5, &past, NULL, FUTEX_BITSET_MATCH_ANY), ETIMEDOUT);
  struct timespec badts = {0, 1000000000};
  CHECK_ERRNO("FUTEX_WAIT bad timespec -> EINVAL", futex(&word, FUTEX_WAIT, 5, &badts, NULL, 0), EINVAL);
  CHECK_ERRNO("FUTEX_WAIT_BITSET mask 0 -> EINVAL", futex(&word, FUTEX_WAIT_BITSET, 5, NULL, NULL, 0), EINVAL);
  /* Wake with nobody waiting. */
  CHECK("FUTEX_WAKE with no waiters returns 0", futex(&word, FUTEX_WAKE, 1, NULL, NULL, 0) == 0);
  CHECK("FUTEX_WAKE private with no waiters returns 0",
        futex(&word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL, NULL, 0) == 0);
  /* Bad addresses. */
  CHECK_ERRNO("FUTEX_WAIT unaligned -> EINVAL", futex((volatile int *)((char *)&word + 1), FUTEX_WAIT, 0, NULL, NULL, 0),
              EINVAL);
  CHECK_ERRNO("FUTEX_WAIT on unmapped address -> EFAULT", futex((volatile int *)8, FUTEX_WAIT, 0, NULL, NULL, 0), EFAULT);
  CHECK_ERRNO("CMP_REQUEUE value mismatch -> EAGAIN",
              futex_requeue(&word, FUTEX_CMP_REQUEUE, 1, 1, &parking, 6), EAGAIN);
  CHECK_ERRNO("unknown futex op -> ENOSYS", futex(&word, 99, 0, NULL, NULL, 0), ENOSYS);

  /* Ping-pong: two threads hand a turn back and forth. */
  pthread_t a, b;
  t0 = now_ms();
  pthread_create(&a, NULL, pp, (void *)0);
  pthread_create(&b, NULL, pp, (void *)1);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("ping-pong rounds: %ld/%ld\n", rounds_done[0], rounds_done[1]);
  CHECK("futex ping-pong completed", rounds_done[0] == ROUNDS && rounds_done[1] == ROUNDS);
  pthread_create(&a, NULL, pp_private, (void *)0);
  pthread_create(&b, NULL, pp_private, (void *)1);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  CHECK("private futex ping-pong completed", prounds[0] == ROUNDS / 4 && prounds[1] == ROUNDS / 4);

  /* Wake counts and requeue, with waiters proven asleep (see park_all). */
  pthread_t w[NWAITERS];
  for (int i = 0; i < NWAITERS; i++) pthread_create(&w[i], NULL, waiter, NULL);
  int parked = park_all(NWAITERS);
  printf("parked waiters: %d\n", parked);
  CHECK("FUTEX_REQUEUE moved all 4 sleeping waiters", parked == NWAITERS);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE); /* woken waiters will leave */
  CHECK("FUTEX_WAKE on the old word wakes nobody", futex(&gate, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) == 0);
  CHECK("FUTEX_WAKE(1) wakes exactly 1", futex(&parking, FUTEX_WAKE, 1, NULL, NULL, 0) == 1);
  long r = futex_requeue(&parking, FUTEX_CMP_REQUEUE, 1, 1, &other, 0);
  printf("CMP_REQUEUE(wake 1, requeue 1) returned %ld\n", r);
  CHECK("FUTEX_CMP_REQUEUE returns woken + requeued", r == 2);
  CHECK("FUTEX_WAKE(INT_MAX) wakes the remaining 1", futex(&parking, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) == 1);
  CHECK("FUTEX_WAKE on requeue target wakes 1", futex(&other, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) == 1);
  for (int i = 0; i < NWAITERS; i++) pthread_join(w[i], NULL);
  CHECK("all waiters woke and exited", woken == NWAITERS);

  /* Bitsets: a waiter with mask 0x2 is not woken by mask 0x1. */
  gate = 0;
  parking = 0;
  pthread_t bw;
  pthread_create(&bw, NULL, bitset_waiter, NULL);
  CHECK("bitset waiter asleep (requeued)", park_all(1) == 1);
  CHECK("FUTEX_WAKE_BITSET non-matching mask wakes nobody",
        futex(&parking, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, 0x1) == 0);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  CHECK("FUTEX_WAKE_BITSET matching mask wakes it",
        futex(&parking, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, 0x2) == 1);
  pthread_join(bw, NULL);

  /* Broadcast rounds: main bumps a generation, 4 threads wait for each. */
  pthread_t bt[NWAITERS];
  for (int i = 0; i < NWAITERS; i++) pthread_create(&bt[i], NULL, gen_follower, NULL);
  for (int g = 1; g <= GENS; g++) {
    while (__atomic_load_n(&acks, __ATOMIC_ACQUIRE) < NWAITERS * (g - 1))
      futex(&acks, FUTEX_WAIT, __atomic_load_n(&acks, __ATOMIC_ACQUIRE) , &ts10ms, NULL, 0);
    __atomic_store_n(&gen, g, __ATOMIC_RELEASE);
    futex(&gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
  for (int i = 0; i < NWAITERS; i++) pthread_join(bt[i], NULL);
  printf("broadcast acks: %d\n", acks);
  CHECK("broadcast generations all acknowledged", acks == NWAITERS * GENS);
  return finish();
}
