/* set*id calls in a process with threads: glibc and musl make them
 * process-wide by running the call on every thread (glibc: SIGSETXID,
 * signal 33, sent with tgkill, and a futex wait for every thread's
 * answer; musl: a synccall signal).  Threads are parked in the ways a
 * daemon's are (a condition variable, sleep, a pipe read, sigwait, pause,
 * spinning); each call must return, and afterwards every thread must have
 * the new ids (checked by each thread with raw syscalls and through
 * /proc/self/task/TID/status).  Must run as root.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define NTHREADS 6

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pipefd[2];
static atomic_int stop;
static atomic_int started;
static pid_t tids[NTHREADS];

/* Each thread's own view, on request: its raw ids. */
static atomic_int ask;
static atomic_int answers;
static unsigned seen_uid[NTHREADS], seen_gid[NTHREADS], seen_ngroups[NTHREADS];

static void answer(int i) {
  uid_t r, e, s;
  gid_t rg, eg, sg;
  syscall(SYS_getresuid, &r, &e, &s);
  syscall(SYS_getresgid, &rg, &eg, &sg);
  seen_uid[i] = (r == e && e == s) ? r : 0xdead;
  seen_gid[i] = (rg == eg && eg == sg) ? rg : 0xdead;
  seen_ngroups[i] = (unsigned)syscall(SYS_getgroups, 0, NULL);
  atomic_fetch_add(&answers, 1);
}

static void on_usr1(int sig) { (void)sig; }

static void *worker(void *arg) {
  int i = (int)(long)arg;
  tids[i] = (pid_t)syscall(SYS_gettid);
  atomic_fetch_add(&started, 1);
  int done = 0;
  while (!atomic_load(&stop)) {
    int a = atomic_load(&ask);
    if (a > done) {
      answer(i);
      done = a;
    }
    switch (i) {
      case 0: {  /* condition variable with a timeout */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_mutex_lock(&mu);
        pthread_cond_timedwait(&cv, &mu, &ts);
        pthread_mutex_unlock(&mu);
        break;
      }
      case 1:
        usleep(20000);
        break;
      case 2: {  /* a pipe read (woken by a byte per request) */
        char b;
        if (read(pipefd[0], &b, 1) != 1) return NULL;
        break;
      }
      case 3: {  /* sigwait for SIGUSR2, with a timeout */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR2);
        struct timespec ts = {0, 20000000};
        sigtimedwait(&set, NULL, &ts);
        break;
      }
      case 4: {  /* poll-free pause, woken by SIGUSR1 */
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        break;
      }
      default:  /* spinning */
        for (volatile int k = 0; k < 100000; k++) {
        }
        break;
    }
  }
  return NULL;
}

static void poll_answers(void) {
  atomic_store(&answers, 0);
  atomic_fetch_add(&ask, 1);
  for (int spins = 0; atomic_load(&answers) < NTHREADS && spins < 60000; spins++) {
    if (write(pipefd[1], "x", 1) != 1) break;
    usleep(1000);
  }
}

static void check_threads(const char *what, unsigned uid, unsigned gid, unsigned ngroups) {
  poll_answers();
  int ok = atomic_load(&answers) >= NTHREADS;
  for (int i = 0; i < NTHREADS; i++) {
    if (seen_uid[i] != uid || seen_gid[i] != gid || seen_ngroups[i] != ngroups) ok = 0;
  }
  char name[128];
  snprintf(name, sizeof(name), "%s: every thread sees it", what);
  CHECK(name, ok);
  /* And /proc agrees, thread by thread. */
  int proc_ok = 1;
  for (int i = 0; i < NTHREADS; i++) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tids[i]);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
      proc_ok = 0;
      continue;
    }
    unsigned r = 1, e = 1, s = 1, fs = 1;
    while (fgets(line, sizeof(line), f)) sscanf(line, "Uid: %u %u %u %u", &r, &e, &s, &fs);
    fclose(f);
    if (r != uid || e != uid || s != uid || fs != uid) proc_ok = 0;
  }
  snprintf(name, sizeof(name), "%s: /proc/self/task/*/status", what);
  CHECK(name, proc_ok);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (getuid() != 0) {
    printf("setxid_threads: must run as root\nRESULT: FAIL\n");
    return 1;
  }
  signal(SIGUSR1, on_usr1);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  if (pipe(pipefd) != 0) return 1;
  pthread_t th[NTHREADS];
  for (long i = 0; i < NTHREADS; i++) pthread_create(&th[i], NULL, worker, (void *)i);
  while (atomic_load(&started) < NTHREADS) usleep(1000);

  /* Calls that change nothing still go to every thread. */
  CHECK("setresgid(0,0,0)", setresgid(0, 0, 0) == 0);
  CHECK("setgroups(1,{0})", setgroups(1, (gid_t[]){0}) == 0);
  CHECK("setuid(0)", setuid(0) == 0);
  check_threads("root", 0, 0, 1);
  /* 500 rounds while the threads keep sleeping and waking. */
  int fails = 0;
  for (int i = 0; i < 500; i++) {
    if (setresuid(0, 0, 0) != 0) fails++;
  }
  CHECK("500 setresuid", fails == 0);

  /* Dropping privileges with threads running, as a daemon does after
   * binding its sockets: groups, gid, then uid. */
  CHECK("setgroups(2)", setgroups(2, (gid_t[]){33, 34}) == 0);
  CHECK("setgid(33)", setgid(33) == 0);
  CHECK("setuid(33)", setuid(33) == 0);
  check_threads("www-data", 33, 33, 2);
  CHECK_ERRNO("setuid(0) after the drop", setuid(0), EPERM);
  check_threads("still www-data", 33, 33, 2);

  atomic_store(&stop, 1);
  for (int i = 0; i < NTHREADS; i++) {
    if (write(pipefd[1], "x", 1) != 1) break;
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  return finish();
}
