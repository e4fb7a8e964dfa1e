/* A fork bomb that ends: forks children that wait on a pipe until fork
 * fails, keeps hammering fork for a while after the first failure (each
 * child of a successful retry forks too), then releases and reaps them all.
 * Run only inside a sandbox with a task limit (test/exhaustion_test.sh):
 * the first failure must be EAGAIN and nothing may die but by exit.
 * Prints "fork_bomb: first failure EAGAIN", "fork_bomb: reaped all" and
 * exits 0 when both hold. */
#include <errno.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 4096

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  double hammer_s = argc > 1 ? atof(argv[1]) : 1.0;
  int p[2];
  if (pipe(p) != 0) return 2;
  int children = 0, first_err = 0, failures = 0, bad_status = 0;
  double until = 0;
  for (;;) {
    if (first_err != 0 && Now() > until) break;
    if (children >= MAX_CHILDREN) break;
    pid_t pid = fork();
    if (pid == 0) {
      close(p[1]);
      /* A grandchild try too: the bomb's children bomb as well. */
      pid_t g = fork();
      char c;
      while (read(p[0], &c, 1) < 0 && errno == EINTR) {
      }
      if (g > 0) waitpid(g, NULL, 0);
      _exit(0);
    }
    if (pid < 0) {
      if (first_err == 0) {
        first_err = errno;
        until = Now() + hammer_s;
      }
      failures++;
      if (errno != EAGAIN) break;
      continue;
    }
    children++;
  }
  close(p[1]);
  int reaped = 0, st;
  for (;;) {
    pid_t w = wait(&st);
    if (w < 0) {
      if (errno == EINTR) continue;
      break;
    }
    reaped++;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad_status++;
  }
  printf("fork_bomb: %d children, %d failed forks\n", children, failures);
  printf("fork_bomb: first failure %s\n",
         first_err == EAGAIN ? "EAGAIN" : strerror(first_err));
  printf("fork_bomb: %s\n", reaped == children && bad_status == 0
                                ? "reaped all"
                                : "lost children");
  return first_err == EAGAIN && reaped == children && bad_status == 0 ? 0 : 1;
}
