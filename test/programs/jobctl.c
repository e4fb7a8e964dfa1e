/* Job control: stop signals stop the whole process, SIGCONT continues it,
 * the parent learns both through SIGCHLD (CLD_STOPPED, CLD_CONTINUED),
 * wait4 (WUNTRACED, WCONTINUED) and waitid (WSTOPPED, WCONTINUED, WNOWAIT),
 * each reported once; the orphaned-process-group rule; the queueing rules
 * (SIGCONT discards pending stop signals); SIGKILL of a stopped process; a
 * stopped multi-threaded process, whose blocked read restarts; sleeps that
 * a stop interrupts go on to their deadline (restart_syscall), and one that
 * a handler interrupts fails with EINTR and the time left. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* The state letter of /proc/PID/stat (the field after the comm). */
static char proc_state(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return '?';
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p != NULL && p[1] == ' ' ? p[2] : '?';
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The next SIGCHLD (blocked in the parent), waiting up to 10 s. */
static int next_sigchld(siginfo_t* si) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  struct timespec ts = {10, 0};
  memset(si, 0, sizeof(*si));
  return sigtimedwait(&set, si, &ts);
}

static int sigchld_pending(void) {
  sigset_t p;
  sigpending(&p);
  return sigismember(&p, SIGCHLD);
}

/* A child that exits when told: the parent looks at continue reports
 * before the exit (an exited child reports its exit first). */
static int g_go[2];
static void wait_for_go(void) {
  char c;
  if (read(g_go[0], &c, 1) != 1) _exit(9);
}
static void go(void) {
  char c = 'g';
  if (write(g_go[1], &c, 1) != 1) printf("go: write failed\n");
}

static void test_stop_continue(void) {
  pid_t pid = fork();
  if (pid == 0) {
    raise(SIGSTOP);
    wait_for_go();
    _exit(7);
  }
  siginfo_t si;
  int sig = next_sigchld(&si);
  CHECK("stop: SIGCHLD", sig == SIGCHLD);
  CHECK("stop: si_code CLD_STOPPED", si.si_code == CLD_STOPPED);
  CHECK("stop: si_status SIGSTOP", si.si_status == SIGSTOP);
  CHECK("stop: si_pid", si.si_pid == pid);
  int st = 0;
  CHECK("stop: waitpid WUNTRACED", waitpid(pid, &st, WUNTRACED) == pid);
  CHECK("stop: WIFSTOPPED", WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP);
  CHECK("stop: reported once",
        waitpid(pid, &st, WUNTRACED | WNOHANG) == 0);
  CHECK("stop: plain waitpid does not see it", waitpid(pid, &st, WNOHANG) == 0);
  CHECK("stop: /proc/PID/stat says T", proc_state(pid) == 'T');

  CHECK("cont: kill", kill(pid, SIGCONT) == 0);
  sig = next_sigchld(&si);
  CHECK("cont: SIGCHLD", sig == SIGCHLD);
  CHECK("cont: si_code CLD_CONTINUED", si.si_code == CLD_CONTINUED);
  CHECK("cont: si_status SIGCONT", si.si_status == SIGCONT);
  pid_t r = waitpid(pid, &st, WCONTINUED);
  CHECK("cont: waitpid WCONTINUED", r == pid && WIFCONTINUED(st));
  CHECK("cont: reported once", waitpid(pid, &st, WCONTINUED | WNOHANG) == 0);
  go();
  CHECK("cont: then the exit", waitpid(pid, &st, WCONTINUED) == pid &&
                                   WIFEXITED(st) && WEXITSTATUS(st) == 7);
  sig = next_sigchld(&si);
  CHECK("exit: SIGCHLD CLD_EXITED",
        sig == SIGCHLD && si.si_code == CLD_EXITED && si.si_status == 7);
}

static volatile sig_atomic_t g_caught;
static void on_signal(int sig) { g_caught = sig; }

static void test_caught_tstp(void) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGTSTP, on_signal);
    setpgid(0, 0);  /* not orphaned: a default SIGTSTP would stop it */
    raise(SIGTSTP);
    _exit(g_caught == SIGTSTP ? 3 : 4);
  }
  int st = 0;
  CHECK("tstp handler: waitpid", waitpid(pid, &st, WUNTRACED) == pid);
  CHECK("tstp handler: caught, not stopped",
        WIFEXITED(st) && WEXITSTATUS(st) == 3);
  siginfo_t si;
  CHECK("tstp handler: only the exit SIGCHLD",
        next_sigchld(&si) == SIGCHLD && si.si_code == CLD_EXITED);
}

static void test_waitid_nowait_and_kill(void) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    raise(SIGTSTP);
    _exit(1);
  }
  siginfo_t si;
  CHECK("waitid: SIGCHLD", next_sigchld(&si) == SIGCHLD &&
                               si.si_code == CLD_STOPPED &&
                               si.si_status == SIGTSTP);
  memset(&si, 0, sizeof(si));
  CHECK("waitid: WSTOPPED|WNOWAIT",
        waitid(P_PID, pid, &si, WSTOPPED | WNOWAIT) == 0);
  CHECK("waitid: CLD_STOPPED SIGTSTP", si.si_signo == SIGCHLD &&
                                           si.si_code == CLD_STOPPED &&
                                           si.si_status == SIGTSTP &&
                                           si.si_pid == pid);
  memset(&si, 0, sizeof(si));
  CHECK("waitid: still there after WNOWAIT",
        waitid(P_PID, pid, &si, WSTOPPED | WNOHANG) == 0 &&
            si.si_pid == pid && si.si_code == CLD_STOPPED);
  memset(&si, 0, sizeof(si));
  CHECK("waitid: consumed",
        waitid(P_PID, pid, &si, WSTOPPED | WNOHANG) == 0 && si.si_pid == 0);
  memset(&si, 0, sizeof(si));
  CHECK("waitid: WEXITED alone does not see a stop",
        waitid(P_PID, pid, &si, WEXITED | WNOHANG) == 0 && si.si_pid == 0);

  CHECK("kill stopped: SIGKILL", kill(pid, SIGKILL) == 0);
  int st = 0;
  CHECK("kill stopped: waitpid", waitpid(pid, &st, 0) == pid);
  CHECK("kill stopped: WIFSIGNALED SIGKILL",
        WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  CHECK("kill stopped: SIGCHLD CLD_KILLED",
        next_sigchld(&si) == SIGCHLD && si.si_code == CLD_KILLED &&
            si.si_status == SIGKILL);
}

static void test_orphaned(void) {
  pid_t pid = fork();
  if (pid == 0) {
    /* Alone in a new session: its process group is orphaned, so the
     * terminal stop signals are discarded (SIGSTOP is not). */
    setsid();
    raise(SIGTSTP);
    raise(SIGTTIN);
    raise(SIGTTOU);
    _exit(5);
  }
  int st = 0;
  CHECK("orphaned: waitpid", waitpid(pid, &st, WUNTRACED) == pid);
  CHECK("orphaned: TSTP/TTIN/TTOU discarded",
        WIFEXITED(st) && WEXITSTATUS(st) == 5);
  siginfo_t si;
  next_sigchld(&si);
}

static void test_cont_discards_stop(void) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTSTP);
    sigprocmask(SIG_BLOCK, &s, NULL);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(9);
    if (read(go[0], &c, 1) != 1) _exit(9);
    sigset_t p;
    sigpending(&p);
    int still = sigismember(&p, SIGTSTP);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    _exit(still ? 6 : 0);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) return;
  kill(pid, SIGTSTP);  /* blocked: pending */
  kill(pid, SIGCONT);  /* discards it */
  if (write(go[1], &c, 1) != 1) return;
  int st = 0;
  CHECK("cont discards stop: waitpid", waitpid(pid, &st, WUNTRACED) == pid);
  CHECK("cont discards stop: not pending, not stopped",
        WIFEXITED(st) && WEXITSTATUS(st) == 0);
  siginfo_t si;
  next_sigchld(&si);
  close(ready[0]); close(ready[1]); close(go[0]); close(go[1]);
}

static void test_ignored_cont_and_nocldstop(void) {
  /* SA_NOCLDSTOP: no SIGCHLD for stop and continue, wait still sees them. */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGCONT, SIG_IGN);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGCONT);
    sigprocmask(SIG_BLOCK, &s, NULL);
    raise(SIGSTOP);
    wait_for_go();
    _exit(8);
  }
  int st = 0;
  CHECK("nocldstop: stopped", waitpid(pid, &st, WUNTRACED) == pid &&
                                  WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP);
  CHECK("nocldstop: no SIGCHLD for the stop", !sigchld_pending());
  kill(pid, SIGCONT);
  memset(&st, 0, sizeof(st));
  siginfo_t wi;
  memset(&wi, 0, sizeof(wi));
  CHECK("ignored+blocked SIGCONT still continues",
        waitid(P_PID, pid, &wi, WCONTINUED) == 0 &&
            wi.si_code == CLD_CONTINUED && wi.si_status == SIGCONT);
  go();
  CHECK("exit after continue", waitpid(pid, &st, 0) == pid &&
                                   WIFEXITED(st) && WEXITSTATUS(st) == 8);
  siginfo_t si;
  CHECK("nocldstop: exit SIGCHLD still comes",
        next_sigchld(&si) == SIGCHLD && si.si_code == CLD_EXITED);
  signal(SIGCHLD, SIG_DFL);
}

/* A stopped process with threads: nobody runs, a blocked read restarts. */
struct shared {
  volatile long spins;
  volatile int got;
  volatile int got2;
};
static struct shared* g_sh;
static int g_pipe[2], g_pipe2[2];

static void* spinner(void* arg) {
  for (;;) __atomic_fetch_add(&g_sh->spins, 1, __ATOMIC_RELAXED);
  return NULL;
}

/* Blocked in poll, then read: both restart after the stop (no -EINTR). */
static void* reader(void* arg) {
  struct pollfd p = {g_pipe[0], POLLIN, 0};
  if (poll(&p, 1, -1) != 1) {
    g_sh->got = -2;
    return NULL;
  }
  char c = 0;
  ssize_t n = read(g_pipe[0], &c, 1);
  g_sh->got = n == 1 && c == 'x' ? 1 : -1;
  return NULL;
}

/* Blocked in read: restarts after the stop. */
static void* reader2(void* arg) {
  char c = 0;
  ssize_t n = read(g_pipe2[0], &c, 1);
  g_sh->got2 = n == 1 && c == 'y' ? 1 : -1;
  return NULL;
}

static void test_threads(void) {
  g_sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
              -1, 0);
  if (g_sh == MAP_FAILED || pipe(g_pipe) != 0 || pipe(g_pipe2) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    pthread_t a, b, c;
    pthread_create(&a, NULL, spinner, NULL);
    pthread_create(&b, NULL, reader, NULL);
    pthread_create(&c, NULL, reader2, NULL);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    _exit(g_sh->got == 1 && g_sh->got2 == 1 ? 0 : 2 + g_sh->got + 4 * g_sh->got2);
  }
  /* Let it run a little. */
  while (__atomic_load_n(&g_sh->spins, __ATOMIC_RELAXED) == 0) sleep_ms(1);
  sleep_ms(50);
  CHECK("threads: SIGSTOP", kill(pid, SIGSTOP) == 0);
  int st = 0;
  CHECK("threads: stopped", waitpid(pid, &st, WUNTRACED) == pid &&
                                WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP);
  long before = __atomic_load_n(&g_sh->spins, __ATOMIC_RELAXED);
  sleep_ms(100);
  long after = __atomic_load_n(&g_sh->spins, __ATOMIC_RELAXED);
  CHECK("threads: no thread runs while stopped", before == after);
  siginfo_t si;
  next_sigchld(&si);
  CHECK("threads: SIGCONT", kill(pid, SIGCONT) == 0);
  CHECK("threads: continued", waitpid(pid, &st, WCONTINUED) == pid &&
                                  WIFCONTINUED(st));
  while (__atomic_load_n(&g_sh->spins, __ATOMIC_RELAXED) == after) sleep_ms(1);
  CHECK("threads: running again", 1);
  next_sigchld(&si);
  char c = 'x', d = 'y';
  CHECK("threads: write", write(g_pipe[1], &c, 1) == 1 &&
                              write(g_pipe2[1], &d, 1) == 1);
  CHECK("threads: the interrupted poll and reads restarted",
        waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  next_sigchld(&si);
  close(g_pipe[0]);
  close(g_pipe[1]);
  close(g_pipe2[0]);
  close(g_pipe2[1]);
}

static long elapsed_ms(const struct timespec* a, const struct timespec* b) {
  return (b->tv_sec - a->tv_sec) * 1000 + (b->tv_nsec - a->tv_nsec) / 1000000;
}

static void on_usr1(int sig) { (void)sig; }

/* A child sleeps 300 ms (nanosleep, then clock_nanosleep) while the parent
 * stops and continues it after 50 ms: the sleep is not cut short, it does
 * not fail with EINTR and it does not start over. Exit code: 0 if so. The
 * upper bound holds in a restored copy too: the time between a checkpoint
 * and its restore does not pass on the sandbox's CLOCK_MONOTONIC, and the
 * sleep goes on for the time it had left. */
static int stopped_sleeper(int use_clock) {
  struct timespec start, end, req = {0, 300000000}, rem = {0, 0};
  clock_gettime(CLOCK_MONOTONIC, &start);
  int r = use_clock ? clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem)
                    : nanosleep(&req, &rem);
  clock_gettime(CLOCK_MONOTONIC, &end);
  long ms = elapsed_ms(&start, &end);
  if (r != 0) return 1;
  if (ms < 295) return 2;
  if (ms > 500 + 300) return 3; /* started over */
  return 0;
}

static void test_sleep_restarts(void) {
  for (int use_clock = 0; use_clock < 2; use_clock++) {
    const char* name = use_clock ? "clock_nanosleep" : "nanosleep";
    char label[96];
    pid_t pid = fork();
    if (pid == 0) _exit(stopped_sleeper(use_clock));
    sleep_ms(50);
    kill(pid, SIGSTOP);
    int st = 0;
    waitpid(pid, &st, WUNTRACED);
    siginfo_t si;
    next_sigchld(&si);
    sleep_ms(100);
    kill(pid, SIGCONT);
    next_sigchld(&si);
    st = 0;
    while (waitpid(pid, &st, 0) != pid) {
    }
    snprintf(label, sizeof label,
             "%s stopped and continued goes on to its deadline", name);
    CHECK(label, WIFEXITED(st) && WEXITSTATUS(st) == 0);
    next_sigchld(&si);
  }

  /* A handler that runs interrupts the sleep for good. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  pid_t pid = fork();
  if (pid == 0) {
    struct timespec req = {2, 0}, rem = {0, 0};
    int r = nanosleep(&req, &rem);
    int ok = r == -1 && errno == EINTR && rem.tv_sec >= 1 && rem.tv_sec < 2;
    _exit(ok ? 0 : 1);
  }
  sleep_ms(50);
  kill(pid, SIGUSR1);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK("nanosleep interrupted by a handler: EINTR and the time left",
        WIFEXITED(st) && WEXITSTATUS(st) == 0);
  siginfo_t si;
  next_sigchld(&si);
  signal(SIGUSR1, SIG_DFL);

  /* With nothing to resume, restart_syscall fails with EINTR. */
  errno = 0;
  long r = syscall(SYS_restart_syscall);
  CHECK("restart_syscall without an interrupted call: EINTR",
        r == -1 && errno == EINTR);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGCHLD);
  sigprocmask(SIG_BLOCK, &s, NULL);
  if (pipe(g_go) != 0) return 1;
  test_stop_continue();
  test_caught_tstp();
  test_waitid_nowait_and_kill();
  test_orphaned();
  test_cont_discards_stop();
  test_ignored_cont_and_nocldstop();
  test_threads();
  test_sleep_restarts();
  return finish();
}
