/* bench_workloads: the everyday operations of real programs, timed inside
 * whatever runs this binary (natively, under the sentry, under runsc).
 *
 *   bench_workloads pipe N        N round trips of one byte between two
 *                                 processes over two pipes
 *   bench_workloads pipe-threads N  the same between two threads of one
 *                                 process
 *   bench_workloads fork N        N x fork + child _exit + waitpid
 *   bench_workloads forkexec N [PROG]  N x fork + execve + waitpid of PROG
 *                                 (default: this static binary in its "exit"
 *                                 mode; e.g. /bin/true, dynamic)
 *   bench_workloads open N FILE   N x open + read 4 KiB + close of FILE
 *   bench_workloads tmpfile N     N x open(O_CREAT|O_TRUNC) + write 4 KiB +
 *                                 close + unlink of a file in /tmp
 *
 * Prints "ns_per_op <float>" (CLOCK_MONOTONIC around the timed loop, after
 * N/10 warm-up operations). Built static so that the same file runs in all
 * three places. Exits non-zero if an operation fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *self;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "bench_workloads: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* The parent writes a byte to `to`, the child echoes it back on `from`. */
static int pipe_fds[2][2];

static void pipe_setup(void) {
  if (pipe(pipe_fds[0]) != 0 || pipe(pipe_fds[1]) != 0) die("pipe");
  pid_t c = fork();
  if (c < 0) die("fork");
  if (c == 0) {
    char b;
    close(pipe_fds[0][1]); /* so that the parent's close is our EOF */
    close(pipe_fds[1][0]);
    for (;;) {
      ssize_t r = read(pipe_fds[0][0], &b, 1);
      if (r != 1) _exit(r == 0 ? 0 : 1);
      if (write(pipe_fds[1][1], &b, 1) != 1) _exit(1);
    }
  }
  close(pipe_fds[0][0]);
  close(pipe_fds[1][1]);
}

static void *pipe_echo_thread(void *arg) {
  (void)arg;
  char b;
  while (read(pipe_fds[0][0], &b, 1) == 1) {
    if (write(pipe_fds[1][1], &b, 1) != 1) break;
  }
  return NULL;
}

static pthread_t echo_thread;

static void pipe_threads_setup(void) {
  if (pipe(pipe_fds[0]) != 0 || pipe(pipe_fds[1]) != 0) die("pipe");
  if (pthread_create(&echo_thread, NULL, pipe_echo_thread, NULL) != 0) die("pthread_create");
}

static void pipe_threads_teardown(void) {
  close(pipe_fds[0][1]);
  pthread_join(echo_thread, NULL);
}

static void pipe_op(void) {
  char b = 'x';
  if (write(pipe_fds[0][1], &b, 1) != 1) die("write");
  if (read(pipe_fds[1][0], &b, 1) != 1) die("read");
}

static void pipe_teardown(void) {
  close(pipe_fds[0][1]);
  int st;
  wait(&st);
}

static void fork_op(void) {
  pid_t c = fork();
  if (c < 0) die("fork");
  if (c == 0) _exit(0);
  int st;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st)) die("waitpid");
}

static const char *exec_path;

static void forkexec_op(void) {
  pid_t c = fork();
  if (c < 0) die("fork");
  if (c == 0) {
    char *args[] = {(char *)exec_path, "exit", NULL};
    char *env[] = {NULL};
    execve(exec_path, args, env);
    _exit(127);
  }
  int st;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    errno = ECHILD;
    die("fork+exec child");
  }
}

static const char *open_path;
static char buf[4096];

static void open_op(void) {
  int fd = open(open_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(open_path);
  if (read(fd, buf, sizeof buf) < 0) die("read");
  close(fd);
}

static char tmp_path[64];

static void tmpfile_op(void) {
  int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die(tmp_path);
  if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) die("write");
  close(fd);
  if (unlink(tmp_path) != 0) die("unlink");
}

int main(int argc, char **argv) {
  self = argv[0];
  if (argc >= 2 && strcmp(argv[1], "exit") == 0) return 0;
  if (argc < 3) {
    fprintf(stderr, "usage: %s pipe|pipe-threads|fork|forkexec|open|tmpfile N [FILE]\n",
            argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  long n = atol(argv[2]);
  if (n <= 0) return 2;
  void (*op)(void) = NULL;
  void (*teardown)(void) = NULL;
  if (strcmp(mode, "pipe") == 0) {
    pipe_setup();
    op = pipe_op;
    teardown = pipe_teardown;
  } else if (strcmp(mode, "pipe-threads") == 0) {
    pipe_threads_setup();
    op = pipe_op;
    teardown = pipe_threads_teardown;
  } else if (strcmp(mode, "fork") == 0) {
    op = fork_op;
  } else if (strcmp(mode, "forkexec") == 0) {
    exec_path = argc > 3 ? argv[3] : self;
    op = forkexec_op;
  } else if (strcmp(mode, "open") == 0) {
    open_path = argc > 3 ? argv[3] : self;
    op = open_op;
  } else if (strcmp(mode, "tmpfile") == 0) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/bench_workloads.%d", (int)getpid());
    op = tmpfile_op;
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  for (long i = 0; i < n / 10; i++) op();
  double t0 = now_ns();
  for (long i = 0; i < n; i++) op();
  double t1 = now_ns();
  if (teardown != NULL) teardown();
  printf("ns_per_op %.1f\n", (t1 - t0) / (double)n);
  return 0;
}
