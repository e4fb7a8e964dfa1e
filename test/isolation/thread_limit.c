/* The platform's bound on the threads of one process is a clone error,
 * not a death: threads parked on a barrier are created until clone fails
 * (at most 5000); it must fail with EAGAIN, after at least 4095 threads
 * in the process (the systrap bound, platforms/systrap/README.md), and
 * the process must live on and join them all. Natively it makes all 5000
 * and passes too. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "raw.h"

#define MAX 5000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go;

static void *parked(void *arg) {
  pthread_mutex_lock(&mu);
  while (!go) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return arg;
}

int main(void) {
  static pthread_t th[MAX];
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 16 * 1024);
  int n = 0, err = 0;
  while (n < MAX) {
    err = pthread_create(&th[n], &attr, parked, NULL);
    if (err != 0) break;
    n++;
  }
  printf("created %d threads (%s)\n", n, err ? strerror(err) : "no error");
  report(err == 0 || err == EAGAIN, "the bound is EAGAIN", err);
  report(err == 0 || n + 1 >= 4095, "at least 4095 threads in the process",
         n + 1);
  pthread_mutex_lock(&mu);
  go = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  int joined = 0;
  for (int i = 0; i < n; i++) joined += pthread_join(th[i], NULL) == 0;
  report(joined == n, "all of them joined", joined);
  return done();
}
