/* A descriptor bomb that ends: opens files of the root filesystem, pipes,
 * eventfds, socketpairs, epoll instances and memfds until each kind fails,
 * prints the first errno of each kind, closes everything, then checks the
 * sandbox still works (a file, a pipe, a thread and a child). Run by
 * test/exhaustion_test.sh under a low RLIMIT_NOFILE of the Sentry itself:
 * every failure must be EMFILE, ENFILE or ENOMEM (the host's refusal seen
 * as the program's own), never an abort. Exits 0 when they all are. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FDS 65536

static int fds[MAX_FDS];
static int nfds;

static int Keep(int fd) {
  if (fd >= 0 && nfds < MAX_FDS) fds[nfds++] = fd;
  return fd;
}

// Distinct files of the root filesystem, each a host descriptor of its
// own in the Sentry (the same file opened twice may share one).
static char names[8192][64];
static int nnames, next_name;

static void ListFiles(const char* dir) {
  DIR* d = opendir(dir);
  if (d == NULL) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && nnames < 8192) {
    if (e->d_type != DT_REG) continue;
    if (snprintf(names[nnames], sizeof(names[0]), "%s/%s", dir, e->d_name) <
        (int)sizeof(names[0])) {
      nnames++;
    }
  }
  closedir(d);
}

static int OpenOne(int kind) {
  int p[2], r;
  switch (kind) {
    case 0:
      if (nnames == 0) return Keep(open("/etc/passwd", O_RDONLY));
      return Keep(open(names[next_name++ % nnames], O_RDONLY));
    case 1:
      r = pipe(p);
      if (r == 0) Keep(p[0]), Keep(p[1]);
      return r;
    case 2:
      return Keep(eventfd(0, 0));
    case 3:
      r = socketpair(AF_UNIX, SOCK_STREAM, 0, p);
      if (r == 0) Keep(p[0]), Keep(p[1]);
      return r;
    case 4:
      return Keep(epoll_create1(0));
    case 5:
      return Keep(memfd_create("fd_bomb", 0));
    case 6:
      return Keep(open("/", O_RDONLY | O_DIRECTORY));
  }
  return -1;
}

static const char* kKinds[] = {"file", "pipe", "eventfd", "socketpair",
                               "epoll", "memfd", "directory"};

static void* Nothing(void* arg) { return arg; }

int main(void) {
  // As many descriptors as the program may have: the host's limit is
  // the one to meet.
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  ListFiles("/usr/bin");
  ListFiles("/usr/lib/x86_64-linux-gnu");
  ListFiles("/usr/share/zoneinfo");
  ListFiles("/etc");
  int bad = 0;
  for (int kind = 0; kind < 7; kind++) {
    int opened = 0, err = 0;
    while (nfds < MAX_FDS - 2) {
      if (OpenOne(kind) < 0) {
        err = errno;
        break;
      }
      opened++;
    }
    int ok = err == EMFILE || err == ENFILE || err == ENOMEM;
    printf("fd_bomb: %s: %s\n", kKinds[kind],
           ok ? "EMFILE, ENFILE or ENOMEM" : strerror(err));
    fprintf(stderr, "fd_bomb: %s: %d opened, then %s\n", kKinds[kind], opened,
            strerror(err));
    if (!ok) bad++;
    // Free half, so that the next kind meets the limit too.
    while (nfds > 0 && nfds > opened / 2) close(fds[--nfds]);
    for (int i = 0; i < nfds; i++) close(fds[i]);
    nfds = 0;
    // Take all but a few again with files, so each kind starts near the
    // limit (a kind that needs two descriptors is refused with both).
    while (nfds < MAX_FDS && OpenOne(0) >= 0) {
    }
    for (int i = 0; i < 4 && nfds > 0; i++) close(fds[--nfds]);
  }
  for (int i = 0; i < nfds; i++) close(fds[i]);
  nfds = 0;
  // Everything works again.
  int fd = open("/etc/passwd", O_RDONLY);
  char c;
  int p[2];
  pthread_t t;
  const char* step = "open";
  int works = fd >= 0;
  if (works) works = read(fd, &c, 1) == 1, step = "read";
  if (works) works = pipe(p) == 0, step = "pipe";
  if (works) {
    works = write(p[1], "x", 1) == 1 && read(p[0], &c, 1) == 1;
    step = "pipe i/o";
  }
  if (works) works = pthread_create(&t, NULL, Nothing, NULL) == 0, step = "thread";
  if (works) works = pthread_join(t, NULL) == 0, step = "join";
  pid_t pid = works ? fork() : -1;
  if (pid == 0) _exit(7);
  int st = 0;
  if (works) {
    works = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
            WEXITSTATUS(st) == 7;
    step = "fork";
  }
  if (!works) fprintf(stderr, "fd_bomb: after: %s failed: %s\n", step, strerror(errno));
  printf("fd_bomb: %s\n", works ? "works after" : "broken after");
  return bad == 0 && works ? 0 : 1;
}
