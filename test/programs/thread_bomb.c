/* A thread bomb that ends: starts threads that wait on a condition until
 * pthread_create fails, keeps retrying for a while after the first
 * failure, then releases and joins them all. Run only inside a sandbox
 * with a task limit (test/exhaustion_test.sh): the failure must be EAGAIN.
 * Prints "thread_bomb: first failure EAGAIN", "thread_bomb: joined all"
 * and exits 0 when both hold.
 * `thread_bomb SECONDS spin`: the threads spin (no syscalls) instead of
 * waiting, so that each one keeps a stub worker (systrap) busy: the host
 * refusing a worker must then be the clone's EAGAIN too. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile int released;
static pthread_t threads[MAX_THREADS];

static void* Spin(void* arg) {
  while (!released) __builtin_ia32_pause();
  return arg;
}

static void* Wait(void* arg) {
  pthread_mutex_lock(&mu);
  while (!released) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return arg;
}

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  double hammer_s = argc > 1 ? atof(argv[1]) : 1.0;
  void* (*fn)(void*) = argc > 2 && strcmp(argv[2], "spin") == 0 ? Spin : Wait;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  int n = 0, first_err = 0, failures = 0;
  double until = 0;
  while (n < MAX_THREADS) {
    if (first_err != 0 && Now() > until) break;
    int r = pthread_create(&threads[n], &attr, fn, NULL);
    if (r != 0) {
      if (first_err == 0) {
        first_err = r;
        until = Now() + hammer_s;
      }
      failures++;
      if (r != EAGAIN) break;
      continue;
    }
    n++;
  }
  pthread_mutex_lock(&mu);
  released = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  int joined = 0;
  for (int i = 0; i < n; i++) {
    if (pthread_join(threads[i], NULL) == 0) joined++;
  }
  printf("thread_bomb: %d threads, %d failed creates\n", n, failures);
  printf("thread_bomb: first failure %s\n",
         first_err == EAGAIN ? "EAGAIN" : strerror(first_err));
  printf("thread_bomb: %s\n", joined == n ? "joined all" : "lost threads");
  return first_err == EAGAIN && joined == n ? 0 : 1;
}
