/* Regression: SIGKILL ends a task inside a long write(2).
 *
 * A child writes 512 MiB of a fresh (zero) mapping into a memfd in one
 * call; the parent SIGKILLs it 100 ms later and times how long until the
 * child is reaped. Linux stops the copy at the fatal signal
 * (generic_perform_write): tens of milliseconds. A Sentry that copied on
 * until the write was done took seconds (10 s for the 2 GiB of
 * MAX_RW_COUNT under load: syscall_fuzz's "worker not reaped 10 s after
 * SIGKILL").
 *
 *   kill_long_write [MiB]     (default 512; prints PASS / FAIL)
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  size_t len = (size_t)atol(argc > 1 ? argv[1] : "512") << 20;
  if (len == 0) len = 512ul << 20;
  pid_t p = fork();
  if (p == 0) {
    char *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = memfd_create("kill_long_write", 0);
    if (m == MAP_FAILED || fd < 0) _exit(2);
    (void)!write(fd, m, len);
    _exit(0);
  }
  if (p < 0) return 1;
  usleep(100000);
  double t0 = now();
  kill(p, SIGKILL);
  int st = 0;
  waitpid(p, &st, 0);
  double dt = now() - t0;
  int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && dt < 2.0;
  printf("%s: a child SIGKILLed in a %zu MiB write was reaped %s 2 s "
         "(killed by signal: %d)\n",
         ok ? "PASS" : "FAIL", len >> 20, dt < 2.0 ? "within" : "after",
         WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return ok ? 0 : 1;
}
