/* Regression: a child that exits at once, while other tasks exit too.
 *
 * Four threads loop on clone(SIGCHLD) and clone(CLONE_VM | CLONE_VFORK |
 * SIGCHLD) whose child exits on its first instruction. A Sentry whose new
 * task could run (and exit, and be joined by another task's exit) before
 * the task's host thread handle was stored destroyed the Task with a
 * joinable std::thread: "terminate called without an active exception",
 * SIGABRT of the Sentry (syscall_fuzz seed 1 found it within a second).
 *
 *   clone_exit_race [seconds]     (default 3; prints PASS / FAIL)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* clone(flags, stack 0); the child exits without touching memory. */
static long clone_exit(long flags) {
  long ret;
  __asm__ volatile("syscall\n\t"
                   "test %%rax, %%rax\n\t"
                   "jnz 1f\n\t"
                   "mov $60, %%eax\n\t"
                   "xor %%edi, %%edi\n\t"
                   "syscall\n\t"
                   "ud2\n"
                   "1:\n\t"
                   : "=a"(ret)
                   : "a"(56L), "D"(flags), "S"(0L), "d"(0L)
                   : "rcx", "r11", "memory");
  return ret;
}

static volatile int stop;
static long clones[4], errors[4];

static void *loop(void *p) {
  long i = (long)p;
  long flags = i % 2 ? (CLONE_VM | CLONE_VFORK | SIGCHLD) : SIGCHLD;
  while (!stop) {
    if (clone_exit(flags) < 0) errors[i]++;
    else clones[i]++;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  int secs = argc > 1 ? atoi(argv[1]) : 3;
  if (secs <= 0) secs = 3;
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, loop, (void *)i);
  sleep((unsigned)secs);
  stop = 1;
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  while (waitpid(-1, NULL, 0) > 0) {
  }
  long n = clones[0] + clones[1] + clones[2] + clones[3];
  long e = errors[0] + errors[1] + errors[2] + errors[3];
  printf("%s: %ld clones whose child exited at once, %ld failed\n",
         n > 0 && e == 0 ? "PASS" : "FAIL", n, e);
  return n > 0 && e == 0 ? 0 : 1;
}
