/* 1000 threads of one process alive at once (more than the 255 a systrap
 * process once had room for): each records its tid and waits on a barrier
 * with all the others, so all are alive together; then all are joined. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

#define NTHREADS 1000

static pthread_barrier_t barrier;
static long tids[NTHREADS];

static void *worker(void *arg) {
  long id = (long)arg;
  tids[id] = syscall(SYS_gettid);
  pthread_barrier_wait(&barrier);
  return (void *)(id + 1);
}

int main(void) {
  static pthread_t th[NTHREADS];
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_barrier_init(&barrier, NULL, NTHREADS + 1);
  int created = 0, err = 0;
  for (long i = 0; i < NTHREADS; i++) {
    err = pthread_create(&th[i], &attr, worker, (void *)i);
    if (err != 0) break;
    created++;
  }
  if (created != NTHREADS) {
    printf("created %d of %d threads: error %d (%s)\n", created, NTHREADS,
           err, strerror(err));
    fflush(stdout);
    _exit(1);
  }
  CHECK("1000 threads created", created == NTHREADS);
  pthread_barrier_wait(&barrier);
  int distinct = 1, joined = 0;
  for (long i = 0; i < NTHREADS; i++) {
    void *ret;
    if (pthread_join(th[i], &ret) == 0 && ret == (void *)(i + 1)) joined++;
    if (tids[i] <= 0 || (i > 0 && tids[i] == tids[i - 1])) distinct = 0;
  }
  CHECK("all alive together (barrier of 1001)", 1);
  CHECK("1000 threads joined with their results", joined == NTHREADS);
  CHECK("tids positive and distinct", distinct);
  return finish();
}
