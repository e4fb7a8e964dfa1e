/* Interval timers, POSIX timers and CPU-time accounting: alarm, setitimer
 * (REAL, VIRTUAL, PROF), timer_create and friends (SIGEV_SIGNAL,
 * SIGEV_NONE, SIGEV_THREAD_ID, TIMER_ABSTIME, overruns, CPU clocks),
 * getrusage, times, wait4's rusage, CPU clock ids, and what fork and exec
 * do to timers. Prints facts only, never times. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/times.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#ifndef SIGEV_THREAD_ID
#define SIGEV_THREAD_ID 4
#endif

/* The kernel's struct sigevent, for SIGEV_THREAD_ID through the raw call. */
struct ksigevent {
  union sigval value;
  int signo;
  int notify;
  int tid;
  int pad[11];
};

static long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long clock_ns(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts) != 0) return -1;
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long tv_ms(struct timeval tv) {
  return tv.tv_sec * 1000LL + tv.tv_usec / 1000;
}

static long long self_user_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return tv_ms(ru.ru_utime);
}

/* Spins in user mode (no syscalls: the monotonic clock is read through
 * the vDSO) until *flag is set or `limit_ms` of wall time passed. */
static volatile sig_atomic_t g_flag;
static int spin_until_flag(long long limit_ms) {
  long long end = mono_ns() + limit_ms * 1000000LL;
  volatile unsigned long x = 0;
  while (!g_flag && mono_ns() < end) {
    for (int i = 0; i < 10000; i++) x += i;
  }
  return g_flag;
}

/* Burns user CPU until getrusage shows `ms` of user time. */
static void burn_user_ms(long long ms) {
  long long start = self_user_ms();
  volatile unsigned long x = 0;
  while (self_user_ms() - start < ms) {
    for (int i = 0; i < 2000000; i++) x += i;
  }
}

static volatile sig_atomic_t g_count;
static void on_count(int sig) {
  (void)sig;
  g_count++;
  g_flag = 1;
}

static volatile int g_si_code, g_si_value, g_si_timerid, g_si_overrun,
    g_max_overrun;
static volatile pid_t g_handler_tid;
static void on_info(int sig, siginfo_t* si, void* uc) {
  (void)sig;
  (void)uc;
  g_si_code = si->si_code;
  g_si_value = si->si_value.sival_int;
  g_si_timerid = si->si_timerid;
  g_si_overrun = si->si_overrun;
  if (si->si_overrun > g_max_overrun) g_max_overrun = si->si_overrun;
  g_handler_tid = (pid_t)syscall(SYS_gettid);
  g_flag = 1;
}

static void handle(int sig, void (*fn)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

static void handle_info(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_info;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

static int ktimer_create(clockid_t clk, struct ksigevent* sev, int* id) {
  return (int)syscall(SYS_timer_create, clk, sev, id);
}
static int ktimer_settime(int id, int flags, const struct itimerspec* v,
                          struct itimerspec* old) {
  return (int)syscall(SYS_timer_settime, id, flags, v, old);
}
static int ktimer_gettime(int id, struct itimerspec* cur) {
  return (int)syscall(SYS_timer_gettime, id, cur);
}
static int ktimer_delete(int id) {
  return (int)syscall(SYS_timer_delete, id);
}

static struct itimerspec its_ms(long long value_ms, long long interval_ms) {
  struct itimerspec v;
  v.it_value.tv_sec = value_ms / 1000;
  v.it_value.tv_nsec = (value_ms % 1000) * 1000000;
  v.it_interval.tv_sec = interval_ms / 1000;
  v.it_interval.tv_nsec = (interval_ms % 1000) * 1000000;
  return v;
}

static struct itimerval itv_ms(long long value_ms, long long interval_ms) {
  struct itimerval v;
  v.it_value.tv_sec = value_ms / 1000;
  v.it_value.tv_usec = (value_ms % 1000) * 1000;
  v.it_interval.tv_sec = interval_ms / 1000;
  v.it_interval.tv_usec = (interval_ms % 1000) * 1000;
  return v;
}

/* After exec: POSIX timers are gone, the interval timer is still armed. */
static int exec_check(void) {
  struct itimerspec cur;
  errno = 0;
  CHECK_ERRNO("exec: POSIX timer deleted by exec",
              ktimer_gettime(0, &cur), EINVAL);
  struct itimerval it;
  getitimer(ITIMER_REAL, &it);
  CHECK("exec: ITIMER_REAL survives exec",
        it.it_value.tv_sec > 0 || it.it_value.tv_usec > 0);
  struct itimerval zero = itv_ms(0, 0);
  setitimer(ITIMER_REAL, &zero, NULL);
  fflush(stdout);
  return g_failures ? 1 : 0;
}

/* Burns CPU until g_flag is set (for sleeps on the process's CPU clock). */
static void* thread_spinner(void* arg) {
  (void)arg;
  spin_until_flag(10000);
  return NULL;
}

/* SIGEV_THREAD_ID: the target thread waits for its handler to run. */
static void* thread_target(void* arg) {
  pid_t* tid = arg;
  *tid = (pid_t)syscall(SYS_gettid);
  long long end = mono_ns() + 5000LL * 1000000LL;
  while (!g_flag && mono_ns() < end) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--exec-check") == 0) return exec_check();
  setvbuf(stdout, NULL, _IONBF, 0);

  /* alarm: the remaining time, rounded; alarm + pause. */
  handle(SIGALRM, on_count);
  alarm(5);
  CHECK("alarm returns the seconds left of the previous alarm", alarm(0) == 5);
  CHECK("alarm(0) with none pending returns 0", alarm(0) == 0);
  g_count = 0;
  alarm(1);
  int pr = pause();
  CHECK("pause ends with EINTR after SIGALRM",
        pr == -1 && errno == EINTR && g_count == 1);

  /* setitimer ITIMER_REAL with an interval: N signals. */
  struct itimerval it = itv_ms(10, 10), old;
  g_count = 0;
  sigset_t alrm, none;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  sigemptyset(&none);
  sigprocmask(SIG_BLOCK, &alrm, NULL);
  CHECK("setitimer ITIMER_REAL", setitimer(ITIMER_REAL, &it, NULL) == 0);
  while (g_count < 5) sigsuspend(&none);
  CHECK("ITIMER_REAL with an interval delivers repeatedly", g_count >= 5);
  struct itimerval zero = itv_ms(0, 0);
  setitimer(ITIMER_REAL, &zero, &old);
  sigprocmask(SIG_UNBLOCK, &alrm, NULL);
  CHECK("setitimer returns the old interval",
        old.it_interval.tv_sec == 0 && old.it_interval.tv_usec == 10000);
  getitimer(ITIMER_REAL, &it);
  CHECK("getitimer after disarming reads zero",
        it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0);
  it = itv_ms(10000, 0);
  setitimer(ITIMER_REAL, &it, NULL);
  getitimer(ITIMER_REAL, &it);
  CHECK("getitimer shows the time left",
        it.it_value.tv_sec <= 10 && tv_ms(it.it_value) > 9000);
  setitimer(ITIMER_REAL, &zero, NULL);
  errno = 0;
  CHECK_ERRNO("setitimer with a bad timer", setitimer(7, &zero, NULL), EINVAL);
  it = itv_ms(0, 0);
  it.it_value.tv_usec = 1000000;
  CHECK_ERRNO("setitimer with tv_usec 1000000",
              setitimer(ITIMER_REAL, &it, NULL), EINVAL);

  /* ITIMER_VIRTUAL and ITIMER_PROF fire in a busy loop without syscalls. */
  handle(SIGVTALRM, on_count);
  handle(SIGPROF, on_count);
  g_flag = 0;
  it = itv_ms(50, 0);
  setitimer(ITIMER_VIRTUAL, &it, NULL);
  CHECK("ITIMER_VIRTUAL fires while spinning in user mode",
        spin_until_flag(5000));
  g_flag = 0;
  setitimer(ITIMER_PROF, &it, NULL);
  CHECK("ITIMER_PROF fires while spinning in user mode", spin_until_flag(5000));
  it = itv_ms(10000, 0);
  setitimer(ITIMER_VIRTUAL, &it, NULL);
  getitimer(ITIMER_VIRTUAL, &it);
  CHECK("getitimer(ITIMER_VIRTUAL) shows the CPU time left",
        tv_ms(it.it_value) > 9000 && tv_ms(it.it_value) <= 10100);
  setitimer(ITIMER_VIRTUAL, &zero, NULL);

  /* timer_create with SIGEV_SIGNAL: si_code, si_value, si_timerid. */
  int sig = SIGRTMIN;
  handle_info(sig);
  struct sigevent sev;
  memset(&sev, 0, sizeof(sev));
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = sig;
  sev.sigev_value.sival_int = 42;
  timer_t tm;
  CHECK("timer_create(CLOCK_MONOTONIC, SIGEV_SIGNAL)",
        timer_create(CLOCK_MONOTONIC, &sev, &tm) == 0);
  CHECK("the first timer id is 0", (intptr_t)tm == 0);
  g_flag = 0;
  struct itimerspec v = its_ms(20, 0), cur;
  timer_settime(tm, 0, &v, NULL);
  timer_gettime(tm, &cur);
  CHECK("timer_gettime shows the time left",
        cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec > 0 &&
            cur.it_value.tv_nsec <= 20000000);
  spin_until_flag(5000);
  CHECK("SIGEV_SIGNAL timer delivers", g_flag == 1);
  CHECK("si_code is SI_TIMER", g_si_code == SI_TIMER);
  CHECK("si_value is the sigevent's", g_si_value == 42);
  CHECK("si_timerid is the timer's id", g_si_timerid == (int)(intptr_t)tm);
  timer_gettime(tm, &cur);
  CHECK("an expired one-shot timer reads zero",
        cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec == 0);

  /* Ids count up and are not reused at once. */
  timer_t t1, t2, t3;
  timer_create(CLOCK_MONOTONIC, NULL, &t1);
  timer_create(CLOCK_MONOTONIC, NULL, &t2);
  timer_delete(t1);
  timer_create(CLOCK_MONOTONIC, NULL, &t3);
  CHECK("timer ids count up without reusing a deleted one",
        (intptr_t)t2 == (intptr_t)t1 + 1 && (intptr_t)t3 == (intptr_t)t2 + 1);
  timer_delete(t2);
  timer_delete(t3);
  errno = 0;
  CHECK_ERRNO("timer_delete of a deleted timer",
              ktimer_delete((int)(intptr_t)t2), EINVAL);
  CHECK_ERRNO("timer_gettime of a deleted timer", ktimer_gettime(9999, &cur),
              EINVAL);
  CHECK_ERRNO("timer_create on an unknown clock",
              timer_create((clockid_t)99, NULL, &t1), EINVAL);
  sev.sigev_notify = 77;
  CHECK_ERRNO("timer_create with a bad sigev_notify",
              timer_create(CLOCK_MONOTONIC, &sev, &t1), EINVAL);
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = 65;
  CHECK_ERRNO("timer_create with a bad signal",
              timer_create(CLOCK_MONOTONIC, &sev, &t1), EINVAL);
  sev.sigev_signo = sig;

  /* TIMER_ABSTIME in the past fires at once. */
  g_flag = 0;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  v = its_ms(0, 0);
  v.it_value.tv_sec = now.tv_sec > 1 ? now.tv_sec - 1 : 1;
  timer_settime(tm, TIMER_ABSTIME, &v, NULL);
  spin_until_flag(5000);
  CHECK("TIMER_ABSTIME in the past fires at once", g_flag == 1);
  timer_delete(tm);

  /* SIGEV_NONE: nothing is sent, the time left is readable. */
  sev.sigev_notify = SIGEV_NONE;
  timer_create(CLOCK_MONOTONIC, &sev, &tm);
  v = its_ms(150, 0);
  g_flag = 0;
  timer_settime(tm, 0, &v, NULL);
  timer_gettime(tm, &cur);
  CHECK("SIGEV_NONE timer counts down",
        cur.it_value.tv_nsec > 0 && cur.it_value.tv_nsec <= 150000000);
  struct timespec ts = {0, 200000000};
  nanosleep(&ts, NULL);
  timer_gettime(tm, &cur);
  CHECK("SIGEV_NONE timer expires without a signal",
        g_flag == 0 && cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec == 0);
  timer_delete(tm);

  /* Overruns: a periodic timer whose signal is blocked. */
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = sig + 1;
  handle_info(sig + 1);
  sigset_t rt;
  sigemptyset(&rt);
  sigaddset(&rt, sig + 1);
  sigprocmask(SIG_BLOCK, &rt, NULL);
  timer_create(CLOCK_MONOTONIC, &sev, &tm);
  v = its_ms(5, 5);
  g_flag = 0;
  g_si_overrun = -1;
  g_max_overrun = -1;
  timer_settime(tm, 0, &v, NULL);
  ts.tv_nsec = 100000000;
  nanosleep(&ts, NULL);
  sigprocmask(SIG_UNBLOCK, &rt, NULL);
  sigprocmask(SIG_BLOCK, &rt, NULL);
  CHECK("the blocked timer signal is delivered once unblocked", g_flag == 1);
  CHECK("si_overrun counts the expirations while it was pending",
        g_max_overrun >= 5);
  CHECK("timer_getoverrun agrees with si_overrun",
        timer_getoverrun(tm) == g_si_overrun);
  /* Re-arming drops the signal still pending from before (Linux 6.13+). */
  g_flag = 0;
  ts.tv_nsec = 20000000;
  nanosleep(&ts, NULL);
  v = its_ms(0, 0);
  timer_settime(tm, 0, &v, NULL);
  sigprocmask(SIG_UNBLOCK, &rt, NULL);
  CHECK("a disarmed timer's pending signal is dropped", g_flag == 0);
  timer_delete(tm);

  /* SIGEV_THREAD_ID: the signal goes to that thread. */
  handle_info(sig + 2);
  pthread_t th;
  volatile pid_t target = 0;
  g_flag = 0;
  g_handler_tid = 0;
  pthread_create(&th, NULL, thread_target, (void*)&target);
  while (target == 0) sched_yield();
  struct ksigevent ksev;
  memset(&ksev, 0, sizeof(ksev));
  ksev.notify = SIGEV_SIGNAL | SIGEV_THREAD_ID;
  ksev.signo = sig + 2;
  ksev.tid = target;
  int kid = -1;
  CHECK("timer_create with SIGEV_THREAD_ID",
        ktimer_create(CLOCK_MONOTONIC, &ksev, &kid) == 0);
  v = its_ms(10, 0);
  ktimer_settime(kid, 0, &v, NULL);
  pthread_join(th, NULL);
  CHECK("SIGEV_THREAD_ID signals the named thread",
        g_flag == 1 && g_handler_tid == target);
  ktimer_delete(kid);
  ksev.tid = 999999;
  errno = 0;
  CHECK_ERRNO("SIGEV_THREAD_ID with an unknown thread",
              ktimer_create(CLOCK_MONOTONIC, &ksev, &kid), EINVAL);

  /* A timer on the process's CPU clock fires while spinning. */
  sev.sigev_signo = sig;
  timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev, &tm);
  v = its_ms(30, 0);
  g_flag = 0;
  timer_settime(tm, 0, &v, NULL);
  CHECK("CLOCK_PROCESS_CPUTIME_ID timer fires while spinning",
        spin_until_flag(5000));
  timer_delete(tm);
  timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &tm);
  g_flag = 0;
  timer_settime(tm, 0, &v, NULL);
  CHECK("CLOCK_THREAD_CPUTIME_ID timer fires while spinning",
        spin_until_flag(5000));
  timer_delete(tm);

  /* CPU clocks count the program's CPU, not its sleep. */
  long long p0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  burn_user_ms(30);
  long long p1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  CHECK("CLOCK_PROCESS_CPUTIME_ID advances with work", p1 - p0 >= 25000000);
  ts.tv_nsec = 200000000;
  nanosleep(&ts, NULL);
  long long p2 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  CHECK("CLOCK_PROCESS_CPUTIME_ID does not count a sleep",
        p2 - p1 < 100000000);
  clockid_t pc, tc;
  CHECK("clock_getcpuclockid(0)", clock_getcpuclockid(0, &pc) == 0);
  long long p3 = clock_ns(pc);
  CHECK("clock_getcpuclockid's clock reads the process's CPU time",
        p3 >= p2 && p3 - p2 < 100000000);
  CHECK("clock_getcpuclockid(getpid())",
        clock_getcpuclockid(getpid(), &pc) == 0 && clock_ns(pc) >= p3);
  CHECK("pthread_getcpuclockid(self)",
        pthread_getcpuclockid(pthread_self(), &tc) == 0);
  long long th0 = clock_ns(tc);
  CHECK("the thread clock reads this thread's CPU time",
        th0 > 0 && th0 <= clock_ns(CLOCK_PROCESS_CPUTIME_ID));
  struct timespec res;
  CHECK("clock_getres(CLOCK_PROCESS_CPUTIME_ID) is 1ns",
        clock_getres(CLOCK_PROCESS_CPUTIME_ID, &res) == 0 &&
            res.tv_sec == 0 && res.tv_nsec == 1);
  errno = 0;
  CHECK_ERRNO("clock_gettime on the CPU clock of a missing pid",
              clock_gettime((clockid_t)((~999999) * 8 + 2), &res), EINVAL);

  /* clock_nanosleep on the process's CPU clock ends once other threads
   * used that much CPU; a thread's own CPU clock is refused. */
  {
    pthread_t sp;
    g_flag = 0;
    pthread_create(&sp, NULL, thread_spinner, NULL);
    long long c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    struct timespec d = {0, 30000000};
    int nr = clock_nanosleep(CLOCK_PROCESS_CPUTIME_ID, 0, &d, NULL);
    long long c1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    g_flag = 1;
    pthread_join(sp, NULL);
    CHECK("clock_nanosleep(CLOCK_PROCESS_CPUTIME_ID) ends after that much CPU",
          nr == 0 && c1 - c0 >= 30000000);
    CHECK("clock_nanosleep(CLOCK_THREAD_CPUTIME_ID) is EINVAL",
          clock_nanosleep(CLOCK_THREAD_CPUTIME_ID, 0, &d, NULL) == EINVAL);
    CHECK("clock_nanosleep(CLOCK_MONOTONIC_RAW) is EOPNOTSUPP",
          clock_nanosleep(CLOCK_MONOTONIC_RAW, 0, &d, NULL) == EOPNOTSUPP);
  }

  /* getrusage and times of self. */
  struct rusage ru;
  CHECK("getrusage(RUSAGE_SELF)", getrusage(RUSAGE_SELF, &ru) == 0);
  CHECK("RUSAGE_SELF user time counts the work", tv_ms(ru.ru_utime) >= 25);
  CHECK("RUSAGE_SELF maxrss is known", ru.ru_maxrss > 0);
  CHECK("RUSAGE_SELF minor faults are counted", ru.ru_minflt > 0);
  CHECK("getrusage(RUSAGE_THREAD)", getrusage(RUSAGE_THREAD, &ru) == 0 &&
                                        tv_ms(ru.ru_utime) >= 25);
  CHECK_ERRNO("getrusage with a bad who", getrusage(5, &ru), EINVAL);
  getrusage(RUSAGE_CHILDREN, &ru);
  CHECK("RUSAGE_CHILDREN is zero before any child is reaped",
        ru.ru_utime.tv_sec == 0 && ru.ru_utime.tv_usec == 0);
  struct tms tb;
  clock_t tr = times(&tb);
  CHECK("times counts user ticks", tr != (clock_t)-1 && tb.tms_utime >= 2);

  /* A child that burns CPU: wait4's rusage, RUSAGE_CHILDREN, times. Its
   * timers are not inherited. */
  it = itv_ms(10000, 0);
  setitimer(ITIMER_REAL, &it, NULL);
  timer_create(CLOCK_MONOTONIC, &sev, &tm);
  v = its_ms(10000, 0);
  timer_settime(tm, 0, &v, NULL);
  pid_t child = fork();
  if (child == 0) {
    struct itimerval cit;
    getitimer(ITIMER_REAL, &cit);
    struct itimerspec cts;
    int inherited_posix = ktimer_gettime((int)(intptr_t)tm, &cts) == 0;
    int inherited_real = cit.it_value.tv_sec != 0 || cit.it_value.tv_usec != 0;
    burn_user_ms(60);
    _exit(inherited_posix || inherited_real ? 3 : 0);
  }
  int status = 0;
  struct rusage cru;
  CHECK("wait4 with rusage", wait4(child, &status, 0, &cru) == child);
  CHECK("fork does not inherit timers",
        WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK("wait4's rusage has the child's user time", tv_ms(cru.ru_utime) >= 30);
  getrusage(RUSAGE_CHILDREN, &ru);
  CHECK("RUSAGE_CHILDREN has the reaped child's user time",
        tv_ms(ru.ru_utime) >= 30);
  times(&tb);
  CHECK("times counts the children's user ticks", tb.tms_cutime >= 3);

  /* exec keeps interval timers and deletes POSIX timers. */
  child = fork();
  if (child == 0) {
    /* A fresh process: its first timer has id 0. */
    timer_t ct;
    timer_create(CLOCK_MONOTONIC, &sev, &ct);
    timer_settime(ct, 0, &v, NULL);
    setitimer(ITIMER_REAL, &it, NULL);
    char* args[] = {argv[0], "--exec-check", NULL};
    execv(argv[0], args);
    _exit(127);
  }
  waitpid(child, &status, 0);
  CHECK("the exec'd image saw its timers as Linux keeps them",
        WIFEXITED(status) && WEXITSTATUS(status) == 0);
  setitimer(ITIMER_REAL, &zero, NULL);
  timer_delete(tm);

  return finish();
}
