/* A syscall fuzzer meant to run inside the sandbox only (test/fuzz/fuzz.sh).
 *
 *   syscall_fuzz [seed=N] [seconds=N] [count=N] [workers=N] [threads=N]
 *                [protect=N] [hb=MS] [only=NR] [lo=NR hi=NR] [skip=NR,...]
 *                [native]
 *
 * The first process is a supervisor: it forks WORKERS worker processes,
 * each running THREADS threads that issue raw `syscall` instructions with
 * random numbers (0..459 mostly, some beyond: up to 1023, x32 numbers,
 * negative and huge values) and edge-case arguments (0, -1, small ints,
 * page-aligned and unaligned pointers into the worker's own buffers,
 * pointers to an unmapped page, to kernel addresses and to the stub's
 * reserved range, huge lengths, random flags, the worker's own fds and
 * path strings). Every thread draws from its own xorshift generator seeded
 * from SEED, the worker's slot and generation, and the thread's index, so
 * a seed names one run (up to the scheduling of threads).
 *
 * The first PROTECT (1) worker slots are protected: they skip the calls
 * that change their own memory or signal handling (munmap, mprotect,
 * mremap, madvise, brk, rt_sigreturn, rt_sigaction, arch_prctl, shmat,
 * shmdt, pkey_mprotect, remap_file_pages; mmap without MAP_FIXED), so
 * they live for the whole run and their kernel state piles up; the others
 * fuzz everything and die often.
 *
 * Workers may die of signals (a forged rt_sigreturn, an munmap of their own
 * code, a handler pointing into a buffer): the supervisor counts those
 * deaths by signal and starts a new worker in the slot. A worker that makes
 * no progress for 3 s (a call blocked past the threads' 100 ms EINTR timer,
 * e.g. after the signal was masked) is killed and counted as stuck. Every
 * HB milliseconds the supervisor prints "HB <ms> <calls>" to stdout (the
 * harness's progress heartbeat); at the end it kills the workers, reaps
 * them (a worker that cannot be reaped in 10 s is a Sentry hang: "FUZZ
 * HANG", exit 3) and prints the totals and "FUZZ DONE".
 *
 * Calls left out of the random set, because they would only end or
 * disturb the fuzzer itself, not test the Sentry:
 *   exit (60), exit_group (231)     end the thread / worker early
 *   execve (59), execveat (322)     replace the fuzzer's image
 *   ptrace (101)                    could stop the supervisor (pid 1)
 *   process_vm_writev (311)         could write into the supervisor
 *   mlockall (151)                  MCL_FUTURE populates every later map
 *   335, 336                        the development hosts' kernel answers
 *                                   these itself, before seccomp (335
 *                                   raises SIGILL): they never reach the
 *                                   Sentry, so they test nothing of it
 * and arguments sanitized, for the same reason or to keep the host's memory
 * bounded (every such call is still made, with the argument changed):
 *   kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo,
 *   pidfd_send_signal: the signal is one of 0, SIGURG, SIGWINCH, SIGCONT
 *     (ignored by default), so pid 1 and -1 are fair targets;
 *   prlimit64: pid 0 (self), not the supervisor;
 *   fork, vfork, clone, clone3: no CLONE_PARENT, exit signal SIGCHLD, and
 *     the child exits at once (register-only code after the syscall, so a
 *     child on a shared or random stack still exits cleanly);
 *   mmap: no MAP_POPULATE / MAP_LOCKED; mmap, mprotect, pkey_mprotect
 *     of more than 64 MiB: PROT_NONE; mremap's new length and shmget's
 *     size below 64 MiB, brk at most 64 MiB above the worker's first break
 *     (so that no readable region is big enough for one write(fd, p, -1)
 *     to copy 2 GiB into a tmpfs file, as it would on Linux); madvise: no
 *     MADV_POPULATE_*; mlock, mlock2, fallocate: length at most 1 MiB.
 *
 * Outside the sandbox (getppid() != 0 or getpid() != 1) it refuses to run
 * unless given "native", and never runs natively as root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 16
#define MAX_THREADS 8
#define BUF_PAGES 16
#define PAGE 4096ul

static long raw6(long n, long a1, long a2, long a3, long a4, long a5,
                 long a6) {
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8),
                     "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}

/* A fork-like call: the child (rax == 0) exits at once without touching
 * memory, whatever stack it was given. */
static long raw6_fork(long n, long a1, long a2, long a3, long a4, long a5,
                      long a6) {
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "mov $60, %%eax\n\t"
      "xor %%edi, %%edi\n\t"
      "syscall\n\t"
      "ud2\n"
      "1:\n\t"
      : "=a"(ret)
      : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
      : "rcx", "r11", "memory");
  return ret;
}

/* Counters of one fuzzing thread, in memory shared with the supervisor. */
struct counters {
  volatile unsigned long calls, ok, enosys, errs;
  volatile long in_call, cur[7]; /* the call being made: nr, 6 args */
};
struct shared {
  struct counters c[MAX_WORKERS][MAX_THREADS];
  volatile unsigned long forks;
};
static struct shared *g_sh;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct rng {
  uint64_t s;
};
static uint64_t rnd(struct rng *r) {
  uint64_t x = r->s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return r->s = x;
}
static uint64_t below(struct rng *r, uint64_t n) { return rnd(r) % n; }

/* What one worker owns: buffers, an unmapped page, fds. */
static unsigned char *g_buf;  /* BUF_PAGES pages, RW, random contents */
static unsigned char *g_hole; /* a page that is unmapped */
static int g_fds[16];
static int g_nfds;
static int g_slot;
static int g_protected; /* the worker's slot is below protect=N */
static const char *const kPaths[] = {
    "/", ".", "..", "/tmp", "/tmp/fuzz", "/tmp/fuzz/a", "/proc/self/mem",
    "/proc/self/fd/0", "/proc/self/root", "/proc/1/root", "/proc/self/maps",
    "/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/tty",
    "/proc/sys/kernel/hostname", "../../../../..", "/proc/self/exe",
    "/dev/shm/fuzz", "fuzzfile", "/proc/self/task", "/proc/self/cwd/..",
};
#define NPATHS (sizeof kPaths / sizeof kPaths[0])

static void fill_buf(struct rng *r) {
  uint64_t *p = (uint64_t *)g_buf;
  for (unsigned long i = 0; i < BUF_PAGES * PAGE / 8 / 2; i++) p[i] = rnd(r);
  /* The upper half holds path strings, one per 256 bytes. */
  for (unsigned i = 0; i < 32; i++) {
    char *d = (char *)g_buf + BUF_PAGES * PAGE / 2 + i * 256;
    strcpy(d, kPaths[i % NPATHS]);
  }
}

static long arg(struct rng *r) {
  switch (below(r, 16)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return (long)below(r, 17);
    case 3: return (long)(uint32_t)rnd(r);
    case 4: return (long)rnd(r);
    case 5: return (long)(g_buf + below(r, BUF_PAGES) * PAGE);
    case 6: return (long)(g_buf + below(r, BUF_PAGES * PAGE));
    case 7: return (long)(g_hole + below(r, 2) * below(r, PAGE));
    case 8: {
      static const long k[] = {(long)0xffffffff81000000ul,
                               (long)0xffff800000000000ul,
                               (long)0x7f0000001000ul, (long)0x7fffffffe000ul,
                               (long)0x800000000000ul, 0x1000, 0x10000};
      return k[below(r, sizeof k / sizeof k[0])];
    }
    case 9: {
      static const long k[] = {1l << 40, 0x7fffffffffffffffl,
                               (long)0xfffffffffffff000ul, 1l << 31,
                               (1l << 32) - 1, 4096, 65536, 1 << 20};
      return k[below(r, sizeof k / sizeof k[0])];
    }
    case 10:
    case 11: return g_nfds ? g_fds[below(r, g_nfds)] : 0;
    case 12: return (long)(1ul << below(r, 64)) | (long)(1ul << below(r, 32));
    case 13:
      return (long)((char *)g_buf + BUF_PAGES * PAGE / 2 +
                    below(r, 32) * 256);
    case 14: /* just before the unmapped page: buf+len crosses into it */
      return (long)(g_hole - below(r, 64));
    default: return (long)below(r, 4096);
  }
}

/* only=NR, lo=NR hi=NR and skip=NR,NR,... (narrowing a failure down). */
static long g_only = -1, g_lo, g_hi; /* lo=, hi=: numbers in [lo, hi) */
static long g_skip[32];
static int g_nskip;

static long pick_nr(struct rng *r) {
  if (g_only >= 0) return g_only;
  if (g_hi > g_lo) return g_lo + (long)below(r, (uint64_t)(g_hi - g_lo));
  uint64_t k = below(r, 100);
  if (k < 95) return (long)below(r, 460);
  switch (below(r, 5)) {
    case 0: return 460 + (long)below(r, 564);
    case 1: return 0x40000000l | (long)below(r, 548);
    case 2: return -1 - (long)below(r, 3);
    case 3: return (long)rnd(r);
    default: return 0x7fffffffl;
  }
}

/* Mappings above this size are PROT_NONE: a read(2)-able region of
 * terabytes would let one write(fd, p, -1) copy 2 GiB into a tmpfs file. */
static const unsigned long kBigMap = 64ul << 20;

static long g_brk0; /* the break when the worker started */

static const int kMildSignals[] = {0, SIGURG, SIGWINCH, SIGCONT};

/* One call; returns 0 when it was skipped. */
static int fuzz_one(struct rng *r, struct counters *c) {
  long nr = pick_nr(r);
  for (int i = 0; i < g_nskip; i++)
    if (g_skip[i] == nr) return 0;
  /* A protected worker keeps its own memory, stack and signal handling:
   * it lives long, and its kernel state (fds, maps, timers) piles up. */
  if (g_protected) {
    switch (nr) {
      case SYS_munmap: case SYS_mprotect: case SYS_mremap: case SYS_madvise:
      case SYS_rt_sigreturn: case SYS_brk: case SYS_rt_sigaction:
      case SYS_arch_prctl: case SYS_pkey_mprotect: case SYS_remap_file_pages:
      case SYS_shmat: case SYS_shmdt:
        return 0;
      default: break;
    }
  }
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = arg(r);
  long mild = kMildSignals[below(r, 4)];
  long ret;
  switch (nr) {
    case SYS_exit: case SYS_exit_group: case SYS_execve: case SYS_execveat:
    case SYS_ptrace: case SYS_process_vm_writev: case SYS_mlockall:
    case 335: case 336:
      return 0;
    case SYS_kill: case SYS_tkill: a[1] = mild; break;
    case SYS_tgkill: a[2] = mild; break;
    case SYS_rt_sigqueueinfo: a[1] = mild; break;
    case SYS_rt_tgsigqueueinfo: a[2] = mild; break;
    case SYS_pidfd_send_signal: a[1] = mild; break;
    case SYS_prlimit64: a[0] = 0; break;
    case SYS_mmap:
      a[3] &= ~(long)(MAP_POPULATE | MAP_LOCKED);
      if (g_protected) a[3] &= ~(long)(MAP_FIXED | MAP_FIXED_NOREPLACE);
      if ((unsigned long)a[1] > kBigMap) a[2] = PROT_NONE;
      break;
    case SYS_mprotect: case SYS_pkey_mprotect:
      if ((unsigned long)a[1] > kBigMap) a[2] = PROT_NONE;
      break;
    case SYS_mremap: a[2] &= (long)kBigMap - 1; break;
    case SYS_shmget: a[1] &= (long)kBigMap - 1; break;
    case SYS_brk:
      if (a[0] != 0 && a[0] != -1)
        a[0] = g_brk0 + (a[0] & ((long)kBigMap - 1));
      break;
    case SYS_madvise:
      if (a[2] == 22 || a[2] == 23) a[2] = MADV_DONTNEED;
      break;
    case SYS_mlock: a[1] &= 0xfffff; break;
    case SYS_mlock2: a[1] &= 0xfffff; break;
    case SYS_fallocate: a[3] &= 0xfffff; break;
    case SYS_fork: case SYS_vfork:
      __atomic_add_fetch(&g_sh->forks, 1, __ATOMIC_RELAXED);
      c->cur[0] = nr;
      c->in_call = 1;
      ret = raw6_fork(nr, 0, 0, 0, 0, 0, 0);
      goto count;
    case SYS_clone:
      a[0] = (a[0] & ~(long)(CLONE_PARENT | CSIGNAL)) | SIGCHLD;
      __atomic_add_fetch(&g_sh->forks, 1, __ATOMIC_RELAXED);
      c->cur[0] = nr;
      for (int i = 0; i < 6; i++) c->cur[i + 1] = a[i];
      c->in_call = 1;
      ret = raw6_fork(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
      goto count;
    case SYS_clone3: {
      /* struct clone_args: flags, pidfd, child_tid, parent_tid,
       * exit_signal, stack, stack_size, tls, ... */
      uint64_t *ca = (uint64_t *)(g_buf + PAGE);
      ca[0] &= ~(uint64_t)(CLONE_PARENT | CSIGNAL);
      ca[4] = SIGCHLD;
      __atomic_add_fetch(&g_sh->forks, 1, __ATOMIC_RELAXED);
      c->cur[0] = nr;
      c->cur[1] = (long)ca;
      c->in_call = 1;
      ret = raw6_fork(nr, (long)ca, below(r, 2) ? 64 : (long)below(r, 128),
                      0, 0, 0, 0);
      goto count;
    }
    default: break;
  }
  c->cur[0] = nr;
  for (int i = 0; i < 6; i++) c->cur[i + 1] = a[i];
  c->in_call = 1;
  ret = raw6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
count:
  c->in_call = 0;
  c->calls++;
  if (ret >= 0 || ret < -4095) c->ok++;
  else if (ret == -ENOSYS) c->enosys++;
  else c->errs++;
  return 1;
}

static void on_alarm(int sig) { (void)sig; }

struct thread_arg {
  int index;
  uint64_t seed;
};

/* Arms a 100 ms periodic SIGALRM for the calling thread, so that a call
 * that blocks returns EINTR (the handler is empty, no SA_RESTART). */
static void arm_timer(timer_t *t, int *have) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  if (!*have) {
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &ev, t) != 0) return;
    *have = 1;
  }
  struct itimerspec its = {{0, 100000000}, {0, 100000000}};
  timer_settime(*t, 0, &its, NULL);
}

static void *fuzz_thread(void *p) {
  struct thread_arg *ta = p;
  struct rng r = {ta->seed | 1};
  struct counters *c = &g_sh->c[g_slot][ta->index];
  timer_t t;
  int have = 0;
  for (unsigned long i = 0;; i++) {
    if ((i & 63) == 0) {
      arm_timer(&t, &have);
      while (waitpid(-1, NULL, WNOHANG | __WALL) > 0) {
      }
    }
    if ((i & 1023) == 0 && ta->index == 0) fill_buf(&r);
    fuzz_one(&r, c);
  }
  return NULL;
}

static void open_fds(void) {
  int p[2], s[2];
  g_nfds = 0;
  if (pipe(p) == 0) { g_fds[g_nfds++] = p[0]; g_fds[g_nfds++] = p[1]; }
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0) {
    g_fds[g_nfds++] = s[0];
    g_fds[g_nfds++] = s[1];
  }
  int fd = (int)syscall(SYS_eventfd2, 0, 0);
  if (fd >= 0) g_fds[g_nfds++] = fd;
  fd = (int)syscall(SYS_memfd_create, "fuzz", 0);
  if (fd >= 0) { g_fds[g_nfds++] = fd; (void)!ftruncate(fd, 8192); }
  fd = (int)syscall(SYS_epoll_create1, 0);
  if (fd >= 0) g_fds[g_nfds++] = fd;
  mkdir("/tmp/fuzz", 0777);
  fd = open("/tmp/fuzz/a", O_RDWR | O_CREAT, 0644);
  if (fd >= 0) { g_fds[g_nfds++] = fd; (void)!write(fd, "fuzz\n", 5); }
  fd = open("/", O_RDONLY | O_DIRECTORY);
  if (fd >= 0) g_fds[g_nfds++] = fd;
  fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0) g_fds[g_nfds++] = fd;
  fd = open("/proc/self/maps", O_RDONLY);
  if (fd >= 0) g_fds[g_nfds++] = fd;
}

static void worker(int slot, uint64_t seed, int nthreads, int protect) {
  g_slot = slot;
  g_protected = slot < protect;
  /* stdio of a worker is /dev/null: random writes to fd 1 must not reach
   * the harness's heartbeat stream. */
  int nul = open("/dev/null", O_RDWR);
  if (nul >= 0) {
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(nul, 2);
    if (nul > 2) close(nul);
  }
  g_buf = mmap(NULL, (BUF_PAGES + 1) * PAGE, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g_buf == MAP_FAILED) _exit(100);
  g_hole = g_buf + BUF_PAGES * PAGE;
  g_brk0 = raw6(SYS_brk, 0, 0, 0, 0, 0, 0);
  munmap(g_hole, PAGE);
  struct rng r = {seed | 1};
  fill_buf(&r);
  open_fds();
  static struct thread_arg ta[MAX_THREADS];
  for (int i = 0; i < nthreads; i++) {
    uint64_t s = seed ^ (0x1000193ull * (uint64_t)(i + 1));
    ta[i].index = i;
    ta[i].seed = splitmix(&s);
  }
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (int i = 1; i < nthreads; i++)
    pthread_create(&th, &attr, fuzz_thread, &ta[i]);
  fuzz_thread(&ta[0]);
}

/* Prints the calls the threads of worker slot w are in. */
static void print_in_call(const char *what, int w) {
  for (int k = 0; k < MAX_THREADS; k++) {
    const struct counters *c = &g_sh->c[w][k];
    if (!c->in_call) continue;
    printf("FUZZ %s worker %d thread %d in syscall %ld(%#lx, %#lx, %#lx, "
           "%#lx, %#lx, %#lx)\n",
           what, w, k, c->cur[0], c->cur[1], c->cur[2], c->cur[3], c->cur[4],
           c->cur[5], c->cur[6]);
  }
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long argl(int argc, char **argv, const char *key, long dflt) {
  size_t k = strlen(key);
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=')
      return strtol(argv[i] + k + 1, NULL, 0);
  return dflt;
}

/* Counts of the workers that are gone (their slots are reused). */
static unsigned long g_done[4];

static void retire(int w) {
  for (int k = 0; k < MAX_THREADS; k++) {
    struct counters *c = &g_sh->c[w][k];
    g_done[0] += c->calls;
    g_done[1] += c->ok;
    g_done[2] += c->enosys;
    g_done[3] += c->errs;
    memset((void *)c, 0, sizeof *c);
  }
}

static unsigned long total_calls(void) {
  unsigned long n = g_done[0];
  for (int w = 0; w < MAX_WORKERS; w++)
    for (int t = 0; t < MAX_THREADS; t++) n += g_sh->c[w][t].calls;
  return n;
}

int main(int argc, char **argv) {
  uint64_t seed = (uint64_t)argl(argc, argv, "seed", 1);
  long seconds = argl(argc, argv, "seconds", 10);
  unsigned long count = (unsigned long)argl(argc, argv, "count", 0);
  int nworkers = (int)argl(argc, argv, "workers", 3);
  int nthreads = (int)argl(argc, argv, "threads", 3);
  long hb = argl(argc, argv, "hb", 1000);
  int protect = (int)argl(argc, argv, "protect", 1);
  int native = 0;
  g_only = argl(argc, argv, "only", -1);
  g_lo = argl(argc, argv, "lo", 0);
  g_hi = argl(argc, argv, "hi", 0);
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "skip=", 5) != 0) continue;
    for (char *p = argv[i] + 5; *p && g_nskip < 32;) {
      g_skip[g_nskip++] = strtol(p, &p, 0);
      if (*p == ',') p++;
      else break;
    }
  }
  for (int i = 1; i < argc; i++) native |= strcmp(argv[i], "native") == 0;
  if (nworkers < 1 || nworkers > MAX_WORKERS || nthreads < 1 ||
      nthreads > MAX_THREADS || seconds < 1) {
    fprintf(stderr, "bad workers/threads/seconds\n");
    return 2;
  }
  int inside = raw6(SYS_getppid, 0, 0, 0, 0, 0, 0) == 0 &&
               raw6(SYS_getpid, 0, 0, 0, 0, 0, 0) == 1;
  if (!inside && !native) {
    fprintf(stderr, "syscall_fuzz: not inside the sandbox (getpid != 1 or "
                    "getppid != 0); refusing to run (\"native\" overrides)\n");
    return 2;
  }
  if (!inside && geteuid() == 0) {
    fprintf(stderr, "syscall_fuzz: refusing to run natively as root\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_sh == MAP_FAILED) return 2;
  /* The supervisor ignores the mild signals workers may send it. */
  signal(SIGURG, SIG_IGN);
  signal(SIGWINCH, SIG_IGN);

  pid_t pids[MAX_WORKERS] = {0};
  unsigned gen[MAX_WORKERS] = {0};
  unsigned long last_calls[MAX_WORKERS] = {0};
  long last_progress[MAX_WORKERS] = {0};
  unsigned long deaths[65] = {0}, exits = 0, stuck = 0, started = 0,
                others = 0;
  long start = now_ms(), next_hb = start;
  printf("FUZZ seed=%llu seconds=%ld workers=%d threads=%d protect=%d\n",
         (unsigned long long)seed, seconds, nworkers, nthreads, protect);
  for (;;) {
    long t = now_ms();
    if (t - start >= seconds * 1000) break;
    if (count && total_calls() >= count) break;
    for (int w = 0; w < nworkers; w++) {
      unsigned long sum = 0;
      for (int k = 0; k < MAX_THREADS; k++) sum += g_sh->c[w][k].calls;
      if (pids[w] > 0) {
        if (sum != last_calls[w]) {
          last_calls[w] = sum;
          last_progress[w] = t;
        } else if (t - last_progress[w] > 3000) {
          print_in_call("stuck", w);
          kill(pids[w], SIGKILL);
          stuck++;
          last_progress[w] = t;
        }
        continue;
      }
      uint64_t s = seed * 1000003ull + (uint64_t)w * 7919 + gen[w]++;
      uint64_t ws = splitmix(&s);
      pid_t p = fork();
      if (p == 0) {
        worker(w, ws, nthreads, protect);
        _exit(0);
      }
      if (p > 0) {
        pids[w] = p;
        started++;
        last_calls[w] = sum;
        last_progress[w] = t;
      }
    }
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG | __WALL)) > 0) {
      int w;
      for (w = 0; w < nworkers && pids[w] != p; w++) {
      }
      if (w == nworkers) { others++; continue; }
      pids[w] = 0;
      retire(w);
      if (WIFSIGNALED(st)) deaths[WTERMSIG(st) & 63]++;
      else exits++;
    }
    if (t >= next_hb) {
      printf("HB %ld %lu\n", t - start, total_calls());
      next_hb = t + hb;
    }
    usleep(20000);
  }
  /* The end: kill every worker, reap them all. */
  for (int w = 0; w < nworkers; w++)
    if (pids[w] > 0) kill(pids[w], SIGKILL);
  long deadline = now_ms() + 10000;
  int left;
  do {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG | __WALL)) > 0)
      for (int w = 0; w < nworkers; w++)
        if (pids[w] == p) pids[w] = 0;
    left = 0;
    for (int w = 0; w < nworkers; w++) left += pids[w] > 0;
    if (left) usleep(20000);
  } while (left && now_ms() < deadline);
  unsigned long calls = g_done[0], ok = g_done[1], enosys = g_done[2],
                errs = g_done[3];
  for (int w = 0; w < MAX_WORKERS; w++)
    for (int k = 0; k < MAX_THREADS; k++) {
      calls += g_sh->c[w][k].calls;
      ok += g_sh->c[w][k].ok;
      enosys += g_sh->c[w][k].enosys;
      errs += g_sh->c[w][k].errs;
    }
  unsigned long died = 0;
  for (int s = 0; s < 65; s++) died += deaths[s];
  printf("FUZZ calls=%lu ok=%lu errno=%lu enosys=%lu forks=%lu\n", calls, ok,
         errs, enosys, g_sh->forks);
  printf("FUZZ workers=%lu exited=%lu stuck_killed=%lu died=%lu "
         "other_children=%lu\n",
         started, exits, stuck, died, others);
  printf("FUZZ deaths");
  for (int s = 1; s < 65; s++)
    if (deaths[s]) printf(" %s=%lu", sigabbrev_np(s) ? sigabbrev_np(s) : "?",
                          deaths[s]);
  printf("\n");
  if (left) {
    for (int w = 0; w < nworkers; w++)
      if (pids[w] > 0) print_in_call("unreaped", w);
    printf("FUZZ HANG %d workers not reaped 10 s after SIGKILL\n", left);
    return 3;
  }
  printf("FUZZ DONE\n");
  return 0;
}
