/* pthread_exit: worker threads exit with values that are joined; then the
 * main thread leaves with pthread_exit while detached workers finish; the
 * process exits 0 when the last thread is gone. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "common.h"

static void *exits_early(void *arg) {
  intptr_t v = (intptr_t)arg;
  if (v >= 0) pthread_exit((void *)(v * 10)); /* never returns */
  return (void *)-1;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int main_gone;
static int next_to_print;
#define NLATE 4

static void *late(void *arg) {
  int me = (int)(intptr_t)arg;
  pthread_mutex_lock(&mu);
  while (!main_gone || next_to_print != me) pthread_cond_wait(&cv, &mu);
  /* Give the main thread a moment to be really gone. */
  pthread_mutex_unlock(&mu);
  struct timespec ts = {0, 2 * 1000 * 1000};
  nanosleep(&ts, NULL);
  pthread_mutex_lock(&mu);
  printf("late worker %d finishing after main\n", me);
  fflush(stdout);
  next_to_print++;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  if (me == NLATE - 1) {
    printf("last worker exiting\n");
    fflush(stdout);
  }
  pthread_exit(NULL);
}

int main(void) {
  pthread_t t[6];
  for (intptr_t i = 0; i < 6; i++) pthread_create(&t[i], NULL, exits_early, (void *)i);
  int ok = 1;
  for (intptr_t i = 0; i < 6; i++) {
    void *ret;
    ok &= pthread_join(t[i], &ret) == 0 && (intptr_t)ret == i * 10;
  }
  CHECK("pthread_exit values joined", ok);

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (intptr_t i = 0; i < NLATE; i++) {
    pthread_t d;
    CHECK("create detached late worker", pthread_create(&d, &attr, late, (void *)i) == 0);
  }
  printf("main thread calling pthread_exit\n");
  fflush(stdout);
  pthread_mutex_lock(&mu);
  main_gone = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_exit(NULL);
}
