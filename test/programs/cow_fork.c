/* Copy-on-write fork: after fork, private memory (heap, stack, data,
 * MAP_PRIVATE file mappings) is each process's own, whoever writes first;
 * shared memory stays shared. Covers a big heap written on both sides,
 * fork while another thread writes, read(2) into a page still shared with
 * the other process, a private file mapping written after fork, and a
 * three-generation chain. Never prints a pid or an address. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define HEAP_BYTES (32u << 20)
#define PAGE 4096u

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }

/* Byte `page`*PAGE + 11 of each page holds pattern(page) (or `v` if set). */
static int heap_is(const unsigned char *h, size_t pages, int v) {
  for (size_t p = 0; p < pages; p++) {
    unsigned char want = v >= 0 ? (unsigned char)v : pattern(p);
    if (h[p * PAGE + 11] != want) return 0;
  }
  return 1;
}

/* Waits for a child; returns its exit status, or -1 if it did not exit. */
static int reap(pid_t c) {
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

static void wait_byte(int fd) {
  char b;
  while (read(fd, &b, 1) != 1) {
  }
}
static void send_byte(int fd) {
  char b = 'x';
  while (write(fd, &b, 1) != 1) {
  }
}

/* --- 1. big heap, writes on both sides ---------------------------------- */
static void big_heap(void) {
  const size_t pages = HEAP_BYTES / PAGE;
  unsigned char *h = malloc(HEAP_BYTES);
  if (h == NULL) {
    CHECK("malloc of the big heap", 0);
    return;
  }
  memset(h, 0x33, HEAP_BYTES);
  for (size_t p = 0; p < pages; p++) h[p * PAGE + 11] = pattern(p);
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
    CHECK("pipes", 0);
    return;
  }
  pid_t c = fork();
  if (c == 0) {
    int bad = 0;
    if (!heap_is(h, pages, -1)) bad |= 1;  /* inherited */
    wait_byte(to_child[0]);                /* the parent has written */
    if (!heap_is(h, pages / 2, -1)) bad |= 2;  /* ...but not here */
    memset(h, 0x5a, HEAP_BYTES / 2);       /* the child's own writes */
    if (!heap_is(h, pages / 2, 0x5a)) bad |= 4;
    send_byte(to_parent[1]);
    _exit(bad);
  }
  for (size_t p = 0; p < pages / 2; p++) h[p * PAGE + 11] = 0xa5;
  send_byte(to_child[1]);
  wait_byte(to_parent[0]);
  CHECK("child saw the heap as of fork, not the parent's later writes",
        reap(c) == 0);
  int untouched = 1;
  for (size_t p = 0; p < pages / 2; p++) {
    if (h[p * PAGE + 100] != 0x33) untouched = 0;
  }
  CHECK("the child's writes did not reach the parent", untouched);
  /* The second half keeps its pattern. */
  int second_ok = 1;
  for (size_t p = pages / 2; p < pages; p++) {
    if (h[p * PAGE + 11] != pattern(p)) second_ok = 0;
  }
  CHECK("parent's first half has its own writes", heap_is(h, pages / 2, 0xa5));
  CHECK("parent's second half is unchanged", second_ok);
  /* The child is gone: writing everything again works in place. */
  memset(h, 0x11, HEAP_BYTES);
  CHECK("parent writes the whole heap after the child exits",
        heap_is(h, pages, 0x11));
  for (int i = 0; i < 2; i++) {
    close(to_child[i]);
    close(to_parent[i]);
  }
  free(h);
}

/* --- 2. fork while another thread writes -------------------------------- */
static volatile uint64_t g_counter;
static volatile int g_stop;
static volatile int g_started;

static void *writer(void *arg) {
  (void)arg;
  while (!g_stop) {
    g_counter++;
    g_started = 1;
  }
  return NULL;
}

static void fork_with_writer_thread(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, writer, NULL) != 0) {
    CHECK("pthread_create", 0);
    return;
  }
  while (!g_started) sched_yield();
  int stable = 1, exited = 1;
  for (int i = 0; i < 20; i++) {
    pid_t c = fork();
    if (c == 0) {
      /* Only this thread exists here; nobody may change our counter. */
      uint64_t first = g_counter;
      for (int k = 0; k < 100; k++) sched_yield();
      uint64_t later = g_counter;
      g_counter = 0;  /* our own write, invisible to the parent */
      _exit(first == later && g_counter == 0 ? 0 : 1);
    }
    int st = reap(c);
    if (st != 0) stable = 0;
    if (st < 0) exited = 0;
  }
  uint64_t before = g_counter;
  /* Up to 10 s: on a loaded machine the writer may wait for a CPU. */
  for (int k = 0; k < 10000 && g_counter == before; k++) usleep(1000);
  CHECK("the writer thread still counts in the parent", g_counter != before);
  g_stop = 1;
  pthread_join(t, NULL);
  CHECK("children of a multithreaded parent exit", exited);
  CHECK("each child's copy of the counter stays still", stable);
}

/* --- 3. read(2) into a page still shared with the parent ---------------- */
static void read_into_cow_page(void) {
  static char buf[3 * PAGE];  /* in .bss: private, shared after fork */
  memset(buf, 'P', sizeof(buf));
  int p[2];
  if (pipe(p) != 0) {
    CHECK("pipe", 0);
    return;
  }
  pid_t c = fork();
  if (c == 0) {
    /* Across a page boundary: the kernel's copy breaks sharing for both. */
    ssize_t n = read(p[0], buf + PAGE - 3, 6);
    int ok = n == 6 && memcmp(buf + PAGE - 3, "child!", 6) == 0 &&
             buf[PAGE - 4] == 'P' && buf[PAGE + 3] == 'P';
    _exit(ok ? 0 : 1);
  }
  if (write(p[1], "child!", 6) != 6) CHECK("write to pipe", 0);
  CHECK("read(2) in the child into a shared page", reap(c) == 0);
  CHECK("the parent's buffer is untouched",
        buf[PAGE - 3] == 'P' && buf[PAGE + 2] == 'P');
  /* And the other way: the parent reads while a child still shares. */
  int go[2];
  if (pipe(go) != 0) {
    CHECK("pipe", 0);
    return;
  }
  c = fork();
  if (c == 0) {
    wait_byte(go[0]);
    _exit(buf[10] == 'P' && buf[PAGE + 10] == 'P' ? 0 : 1);
  }
  if (write(p[1], "parent", 6) != 6) CHECK("write to pipe", 0);
  ssize_t n = read(p[0], buf + 5, 6);
  CHECK("read(2) in the parent", n == 6 && memcmp(buf + 5, "parent", 6) == 0);
  send_byte(go[1]);
  CHECK("the child's buffer is untouched", reap(c) == 0);
  close(p[0]);
  close(p[1]);
  close(go[0]);
  close(go[1]);
}

/* --- 4. MAP_PRIVATE file mapping written after fork --------------------- */
static void private_file_mapping(void) {
  char path[] = "/tmp/sbx_cow_fork_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    CHECK("mkstemp", 0);
    return;
  }
  unlink(path);
  char data[2 * PAGE];
  for (size_t i = 0; i < sizeof(data); i++) data[i] = (char)('a' + i % 26);
  if (write(fd, data, sizeof(data)) != (ssize_t)sizeof(data)) {
    CHECK("writing the file", 0);
    close(fd);
    return;
  }
  char *m = mmap(NULL, sizeof(data), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    CHECK("mmap MAP_PRIVATE of a file", 0);
    close(fd);
    return;
  }
  m[1] = '1';  /* written before fork: the child inherits it */
  pid_t c = fork();
  if (c == 0) {
    int ok = m[1] == '1' && m[PAGE] == data[PAGE];
    m[2] = 'C';
    m[PAGE] = 'C';
    ok = ok && m[2] == 'C' && m[PAGE] == 'C';
    _exit(ok ? 0 : 1);
  }
  CHECK("child sees the private mapping as of fork and writes it",
        reap(c) == 0);
  CHECK("the child's writes are not in the parent's mapping",
        m[2] == data[2] && m[PAGE] == data[PAGE] && m[1] == '1');
  m[PAGE + 1] = 'P';
  char file[4];
  CHECK("the file itself is unchanged",
        pread(fd, file, 3, 0) == 3 && memcmp(file, data, 3) == 0 &&
            pread(fd, file, 2, PAGE) == 2 &&
            memcmp(file, data + PAGE, 2) == 0);
  munmap(m, sizeof(data));
  close(fd);
}

/* --- 5. three generations ------------------------------------------------ */
static int g_gen[3] = {1, 1, 1};

static void three_generations(void) {
  pid_t c = fork();
  if (c == 0) {
    g_gen[1] = 2;
    pid_t gc = fork();
    if (gc == 0) {
      g_gen[2] = 3;
      _exit(g_gen[0] == 1 && g_gen[1] == 2 && g_gen[2] == 3 ? 0 : 1);
    }
    int st = reap(gc);
    _exit(st == 0 && g_gen[1] == 2 && g_gen[2] == 1 ? 0 : 1);
  }
  g_gen[0] = 9;
  CHECK("each generation keeps its own writes", reap(c) == 0);
  CHECK("the first generation sees none of its descendants' writes",
        g_gen[0] == 9 && g_gen[1] == 1 && g_gen[2] == 1);
}

/* --- 6. shared memory stays shared --------------------------------------- */
static void shared_stays_shared(void) {
  int *s = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                -1, 0);
  if (s == MAP_FAILED) {
    CHECK("mmap MAP_SHARED", 0);
    return;
  }
  *s = 1;
  pid_t c = fork();
  if (c == 0) {
    *s = 2;
    _exit(0);
  }
  reap(c);
  CHECK("MAP_SHARED|MAP_ANONYMOUS is still shared after fork", *s == 2);
  munmap(s, PAGE);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  big_heap();
  fork_with_writer_thread();
  read_into_cow_page();
  private_file_mapping();
  three_generations();
  shared_stays_shared();
  return finish();
}
