/* Signal delivery to handlers: synchronous faults, raise/kill/pthread_kill,
 * SA_SIGINFO contents, masks during handlers, SA_RESETHAND, SA_NODEFER,
 * sigaltstack/SA_ONSTACK, pending blocked signals, FPU state preserved
 * across a handler. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

static sigjmp_buf jb;
static volatile sig_atomic_t count, last_signo, last_code, on_alt, mask_has_usr2,
    handler_tid_ok;
static volatile uintptr_t last_addr;
static char altstack[65536];
static volatile double fp_in_handler;

static void jump_handler(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  last_signo = sig;
  last_code = si->si_code;
  last_addr = (uintptr_t)si->si_addr;
  siglongjmp(jb, 1);
}

static void info_handler(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  count++;
  last_signo = sig;
  last_code = si->si_code;
  char local;
  on_alt = (uintptr_t)&local >= (uintptr_t)altstack &&
           (uintptr_t)&local < (uintptr_t)altstack + sizeof altstack;
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  mask_has_usr2 = sigismember(&cur, SIGUSR2);
  /* Clobber the FPU: the interrupted code must not see it. */
  volatile double x = 3.0;
  fp_in_handler = x * 7.25;
}

static void nested_handler(int sig) {
  count++;
  if (count == 1) raise(sig); /* re-entered only with SA_NODEFER */
}

/* Counts only: a handler that raised again under SA_RESETHAND would find
 * the default action (terminate) once it returns. */
static void count_handler(int sig) {
  (void)sig;
  count++;
}

static pid_t main_tid;
static void tid_handler(int sig) {
  (void)sig;
  handler_tid_ok = syscall(SYS_gettid) != main_tid;
}
static void *thread_wait(void *arg) {
  (void)arg;
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < 2000 && !handler_tid_ok; i++) usleep(1000);
  return NULL;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);

  /* 1. SIGSEGV from a NULL write, caught and left with siglongjmp. */
  sa.sa_sigaction = jump_handler;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  if (sigsetjmp(jb, 1) == 0) {
    volatile int *volatile bad = (volatile int *)16;
    *bad = 1;
    CHECK("SIGSEGV handler ran", 0);
  } else {
    CHECK("SIGSEGV handler ran", last_signo == SIGSEGV);
    CHECK("si_code is SEGV_MAPERR", last_code == SEGV_MAPERR);
    CHECK("si_addr is the faulting address", last_addr == 16);
  }
  /* A write to read-only memory: SEGV_ACCERR. */
  static const int ro = 5;
  if (sigsetjmp(jb, 1) == 0) {
    *(volatile int *)&ro = 6;
    CHECK("write to read-only memory faults", 0);
  } else {
    CHECK("write to read-only memory faults", last_signo == SIGSEGV);
    CHECK("si_code is SEGV_ACCERR", last_code == SEGV_ACCERR);
  }
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  CHECK("siglongjmp restored the mask", sigismember(&cur, SIGSEGV) == 0);

  /* 2. SIGFPE from an integer division by zero. */
  sa.sa_sigaction = jump_handler;
  sigaction(SIGFPE, &sa, NULL);
  if (sigsetjmp(jb, 1) == 0) {
    volatile int zero = 0, one = 1;
    volatile int r = one / zero;
    (void)r;
    CHECK("SIGFPE handler ran", 0);
  } else {
    CHECK("SIGFPE handler ran", last_signo == SIGFPE);
    CHECK("si_code is FPE_INTDIV", last_code == FPE_INTDIV);
  }

  /* 3. raise() with SA_SIGINFO, sa_mask, sigaltstack + SA_ONSTACK. */
  stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
  CHECK("sigaltstack", sigaltstack(&ss, NULL) == 0);
  sa.sa_sigaction = info_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaddset(&sa.sa_mask, SIGUSR2);
  sigaction(SIGUSR1, &sa, NULL);
  volatile double before = 1.5;
  double keep = before * 2.0;
  count = 0;
  raise(SIGUSR1);
  CHECK("handler ran once", count == 1);
  CHECK("si_signo", last_signo == SIGUSR1);
  CHECK("si_code is SI_TKILL for raise", last_code == SI_TKILL);
  CHECK("handler ran on the alternate stack", on_alt == 1);
  CHECK("sa_mask was blocked in the handler", mask_has_usr2 == 1);
  CHECK("FPU value survives the handler", keep == 3.0 && fp_in_handler == 21.75);
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  CHECK("mask restored after the handler", sigismember(&cur, SIGUSR2) == 0 &&
                                                 sigismember(&cur, SIGUSR1) == 0);
  stack_t old;
  sigaltstack(NULL, &old);
  CHECK("alternate stack still set, not in use", old.ss_sp == altstack && old.ss_flags == 0);

  /* 4. kill(getpid()) is delivered too; SI_USER. */
  count = 0;
  kill(getpid(), SIGUSR1);
  CHECK("kill(getpid()) delivered", count == 1 && last_code == SI_USER);

  /* 5. A blocked signal stays pending until unblocked. */
  sigset_t b;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &b, NULL);
  count = 0;
  raise(SIGUSR1);
  CHECK("blocked signal not delivered", count == 0);
  sigset_t pend;
  sigpending(&pend);
  CHECK("blocked signal is pending", sigismember(&pend, SIGUSR1) == 1);
  pthread_sigmask(SIG_UNBLOCK, &b, NULL);
  CHECK("delivered once unblocked", count == 1);
  sigpending(&pend);
  CHECK("no longer pending", sigismember(&pend, SIGUSR1) == 0);

  /* 6. SA_RESETHAND and SA_NODEFER. */
  struct sigaction nd;
  memset(&nd, 0, sizeof nd);
  nd.sa_handler = nested_handler;
  nd.sa_flags = SA_NODEFER;
  sigaction(SIGUSR2, &nd, NULL);
  count = 0;
  raise(SIGUSR2);
  CHECK("SA_NODEFER lets the handler re-enter", count == 2);
  nd.sa_handler = count_handler;
  nd.sa_flags = SA_RESETHAND;
  sigaction(SIGUSR2, &nd, NULL);
  count = 0;
  raise(SIGUSR2);
  struct sigaction now;
  sigaction(SIGUSR2, NULL, &now);
  CHECK("SA_RESETHAND: handler ran, disposition reset", count == 1 && now.sa_handler == SIG_DFL);

  /* 7. pthread_kill to another thread runs the handler there. */
  main_tid = syscall(SYS_gettid);
  signal(SIGUSR1, tid_handler);
  pthread_t t;
  pthread_create(&t, NULL, thread_wait, NULL);
  pthread_kill(t, SIGUSR1);
  pthread_join(t, NULL);
  CHECK("pthread_kill ran the handler in the target thread", handler_tid_ok == 1);

  /* 8. An ignored signal is discarded. */
  signal(SIGUSR1, SIG_IGN);
  CHECK("ignored signal discarded", raise(SIGUSR1) == 0);
  return finish();
}
