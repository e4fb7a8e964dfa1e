/* MAP_SHARED mappings of a file in the working directory, which the
 * comparison makes a bind mount of a host directory in the sandbox
 * (compare.sh, COMPARE_BIND_CWD): writes through a mapping are seen by
 * read(), by a second mapping and by a forked child's mapping (and the
 * child's by the parent); write() is seen by the mapping; msync; SIGBUS
 * past the end of the file; truncate and growing again show zeros; what
 * reaches the file after munmap and exit (compare.sh prints the files the
 * run left behind). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define PG 4096

static sigjmp_buf g_jump;
static volatile sig_atomic_t g_signo;

static void on_signal(int signo) {
  g_signo = signo;
  siglongjmp(g_jump, 1);
}

/* The signal a read of *p raises (0: none). */
static int touch(volatile char *p) {
  g_signo = 0;
  if (sigsetjmp(g_jump, 1) == 0) {
    (void)*p;
  }
  return g_signo;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGSEGV, &sa, NULL);

  int fd = open("shared.dat", O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK("open", fd >= 0);
  char buf[2 * PG];
  memset(buf, 'a', sizeof buf);
  CHECK("write 2 pages", write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);

  char *m = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("mmap shared rw", m != MAP_FAILED);
  if (m == MAP_FAILED) return finish();
  CHECK("mapping shows the file", m[0] == 'a' && m[2 * PG - 1] == 'a');

  memcpy(m + 10, "via-map", 7);
  char r[16] = {0};
  CHECK("read() sees the mapping's write",
        pread(fd, r, 7, 10) == 7 && memcmp(r, "via-map", 7) == 0);

  CHECK("pwrite", pwrite(fd, "via-write", 9, PG + 5) == 9);
  CHECK("the mapping sees write()", memcmp(m + PG + 5, "via-write", 9) == 0);

  char *m2 = mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, PG);
  CHECK("second mapping (offset 1 page)", m2 != MAP_FAILED);
  if (m2 != MAP_FAILED) {
    CHECK("second mapping sees the write", memcmp(m2 + 5, "via-write", 9) == 0);
    m[PG + 100] = 'Z';
    CHECK("second mapping sees a later mapped write", m2[100] == 'Z');
  }

  /* A private mapping reads the file as the shared ones left it. */
  char *p = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  CHECK("private mapping", p != MAP_FAILED);
  if (p != MAP_FAILED) {
    CHECK("private mapping sees the shared write", memcmp(p + 10, "via-map", 7) == 0);
    p[0] = 'P';
    CHECK("private write stays private", m[0] == 'a');
    munmap(p, PG);
  }

  /* Across fork: the same pages. */
  pid_t pid = fork();
  if (pid == 0) {
    m[200] = 'C';
    while (m[201] != 'P') usleep(1000);
    m[202] = 'D';
    _exit(0);
  }
  while (m[200] != 'C') usleep(1000);
  CHECK("parent sees the child's write", m[200] == 'C');
  m[201] = 'P';
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK("child exited", WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK("parent sees the child's last write", m[202] == 'D');

  CHECK("msync MS_SYNC", msync(m, 2 * PG, MS_SYNC) == 0);
  CHECK("msync MS_ASYNC", msync(m, PG, MS_ASYNC) == 0);
  CHECK("fsync", fsync(fd) == 0);

  /* Past the end of the file: SIGBUS. */
  char *big = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("mapping longer than the file", big != MAP_FAILED);
  if (big != MAP_FAILED) {
    CHECK("inside the file: no signal", touch(big + PG) == 0);
    CHECK("a page past EOF: SIGBUS", touch(big + 2 * PG) == SIGBUS);
    CHECK("grow with ftruncate", ftruncate(fd, 3 * PG) == 0);
    CHECK("the grown page: no signal, zeros",
          touch(big + 2 * PG) == 0 && big[2 * PG] == 0);
    big[2 * PG + 1] = 'G';
    munmap(big, 4 * PG);
  }

  /* Truncate to within page 0: its tail reads as zeros, also after
   * growing again. */
  CHECK("truncate to 300", ftruncate(fd, 300) == 0);
  struct stat sb;
  CHECK("fstat after truncate", fstat(fd, &sb) == 0 && sb.st_size == 300);
  CHECK("mapping keeps the bytes before the cut", memcmp(m + 10, "via-map", 7) == 0);
  CHECK("the cut tail of the page reads zero", m[300] == 0 && m[PG - 1] == 0);
  CHECK("grow back", ftruncate(fd, 2 * PG) == 0);
  memset(r, 1, sizeof r);
  CHECK("read() of the grown range: zeros",
        pread(fd, r, 8, 400) == 8 && r[0] == 0 && r[7] == 0);
  memcpy(m + 1000, "after-grow", 10);
  CHECK("read() sees a write after growing",
        pread(fd, r, 10, 1000) == 10 && memcmp(r, "after-grow", 10) == 0);

  if (m2 != MAP_FAILED) munmap(m2, PG);
  CHECK("munmap", munmap(m, 2 * PG) == 0);

  /* A mapping written and unmapped, then the file read again. */
  char *m3 = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("map again", m3 != MAP_FAILED);
  if (m3 != MAP_FAILED) {
    CHECK("a new mapping sees the old one's writes",
          memcmp(m3 + 1000, "after-grow", 10) == 0);
    memcpy(m3 + 2000, "last", 4);
    munmap(m3, PG);
  }
  CHECK("read() after munmap",
        pread(fd, r, 4, 2000) == 4 && memcmp(r, "last", 4) == 0);
  close(fd);

  /* Written only through a mapping, then the process exits: the data
   * must reach the file (compare.sh prints it) before the parent can
   * learn of the exit. Repeated: the exit and the parent's read race. */
  int exit_ok = 0;
  for (int i = 0; i < 40; i++) {
    pid = fork();
    if (pid == 0) {
      int f = open("exit.dat", O_RDWR | O_CREAT | O_TRUNC, 0644);
      if (f < 0 || ftruncate(f, 64) != 0) _exit(1);
      char *e = mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
      if (e == MAP_FAILED) _exit(2);
      close(f);
      memcpy(e, "written-by-a-mapping-then-exit", 30);
      _exit(0);
    }
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) break;
    fd = open("exit.dat", O_RDONLY);
    int ok = fd >= 0 && pread(fd, r, 7, 0) == 7 && memcmp(r, "written", 7) == 0;
    if (fd >= 0) close(fd);
    if (!ok) break;
    exit_ok++;
  }
  CHECK("read() of an exited process's mapped write (40 times)", exit_ok == 40);
  return finish();
}
