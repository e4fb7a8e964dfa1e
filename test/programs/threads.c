/* pthreads: 8 threads incrementing a counter under a mutex, condition-variable
 * ping-pong, a barrier, thread-local storage, join results. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

#define NTHREADS 8
#define INCREMENTS 20000
#define PINGPONG 2000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static __thread long tls_value = 7;
static __thread char tls_buf[256];
static pthread_barrier_t barrier;
static long tids[NTHREADS];

static void *incrementer(void *arg) {
  long id = (long)arg;
  int tls_ok = tls_value == 7;
  tls_value = id * 1000;
  memset(tls_buf, (int)id, sizeof tls_buf);
  tids[id] = syscall(SYS_gettid);
  pthread_barrier_wait(&barrier);
  for (int i = 0; i < INCREMENTS; i++) {
    pthread_mutex_lock(&mu);
    counter++;
    pthread_mutex_unlock(&mu);
    if (i % 1000 == 0) sched_yield();
  }
  tls_ok &= tls_value == id * 1000 && tls_buf[0] == (char)id && tls_buf[255] == (char)id;
  tls_ok &= getpid() != syscall(SYS_gettid);
  return (void *)(intptr_t)(tls_ok ? id + 100 : -1);
}

/* Condition-variable handoff between two threads. */
static pthread_mutex_t pp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pp_cv = PTHREAD_COND_INITIALIZER;
static int turn; /* 0: ping's turn, 1: pong's turn */
static long pp_count[2];

static void *pingpong(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int i = 0; i < PINGPONG; i++) {
    pthread_mutex_lock(&pp_mu);
    while (turn != me) pthread_cond_wait(&pp_cv, &pp_mu);
    pp_count[me]++;
    turn = !me;
    pthread_cond_signal(&pp_cv);
    pthread_mutex_unlock(&pp_mu);
  }
  return NULL;
}

/* Producer/consumer with a bounded queue and two condition variables. */
#define QCAP 4
#define ITEMS 5000
static int q[QCAP], qhead, qlen;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;
static long consumed_sum;

static void *producer(void *arg) {
  for (int i = 1; i <= ITEMS; i++) {
    pthread_mutex_lock(&mu);
    while (qlen == QCAP) pthread_cond_wait(&not_full, &mu);
    q[(qhead + qlen++) % QCAP] = i;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}
static void *consumer(void *arg) {
  for (int i = 1; i <= ITEMS; i++) {
    pthread_mutex_lock(&mu);
    while (qlen == 0) pthread_cond_wait(&not_empty, &mu);
    consumed_sum += q[qhead];
    qhead = (qhead + 1) % QCAP;
    qlen--;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

static void *square(void *arg) {
  intptr_t v = (intptr_t)arg;
  return (void *)(v * v);
}

static int detached_done;
static pthread_cond_t detached_cv = PTHREAD_COND_INITIALIZER;
static void *detached(void *arg) {
  pthread_mutex_lock(&mu);
  detached_done++;
  pthread_cond_signal(&detached_cv);
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(void) {
  pthread_t th[NTHREADS];
  pthread_barrier_init(&barrier, NULL, NTHREADS);
  int created = 1;
  for (long i = 0; i < NTHREADS; i++) created &= pthread_create(&th[i], NULL, incrementer, (void *)i) == 0;
  CHECK("create 8 threads", created);
  int joined_ok = 1;
  for (long i = 0; i < NTHREADS; i++) {
    void *ret = NULL;
    joined_ok &= pthread_join(th[i], &ret) == 0 && (intptr_t)ret == i + 100;
  }
  CHECK("join returns each thread's value (and its TLS was private)", joined_ok);
  printf("counter: %ld (want %d)\n", counter, NTHREADS * INCREMENTS);
  CHECK("mutex-protected counter", counter == (long)NTHREADS * INCREMENTS);
  int distinct = 1;
  for (int i = 0; i < NTHREADS; i++)
    for (int j = i + 1; j < NTHREADS; j++) distinct &= tids[i] != tids[j];
  CHECK("thread ids distinct", distinct);
  CHECK("main thread TLS untouched", tls_value == 7);
  CHECK("main thread: getpid == gettid", getpid() == syscall(SYS_gettid));

  pthread_t a, b;
  pthread_create(&a, NULL, pingpong, (void *)0);
  pthread_create(&b, NULL, pingpong, (void *)1);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("ping-pong rounds: %ld/%ld\n", pp_count[0], pp_count[1]);
  CHECK("condition variable ping-pong", pp_count[0] == PINGPONG && pp_count[1] == PINGPONG);

  pthread_t p, c;
  pthread_create(&p, NULL, producer, NULL);
  pthread_create(&c, NULL, consumer, NULL);
  pthread_join(p, NULL);
  pthread_join(c, NULL);
  printf("consumed sum: %ld\n", consumed_sum);
  CHECK("bounded queue producer/consumer", consumed_sum == (long)ITEMS * (ITEMS + 1) / 2);

  /* Many short-lived threads, joined one by one; and detached ones. */
  int many_ok = 1;
  for (long i = 0; i < 100; i++) {
    pthread_t t;
    void *ret = NULL;
    many_ok &= pthread_create(&t, NULL, square, (void *)i) == 0;
    many_ok &= pthread_join(t, &ret) == 0 && (intptr_t)ret == i * i;
  }
  CHECK("100 sequential create/join", many_ok);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int det_ok = 1;
  for (int i = 0; i < 16; i++) {
    pthread_t t;
    det_ok &= pthread_create(&t, &attr, detached, NULL) == 0;
  }
  pthread_mutex_lock(&mu);
  while (detached_done < 16) pthread_cond_wait(&detached_cv, &mu);
  pthread_mutex_unlock(&mu);
  CHECK("16 detached threads ran", det_ok && detached_done == 16);
  return finish();
}
