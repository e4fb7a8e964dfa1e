/* /proc as a program sees it: its own stat/status/maps/fd/..., magic links,
 * other processes (a child, a zombie), threads, and the system-wide files
 * procps reads.  Prints relations only, never pids or addresses. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* Reads a whole file (up to cap-1 bytes) into buf, NUL-terminated, in
 * small chunks so that the seq-file snapshot is exercised; returns the
 * length or -1. */
static long slurp(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  size_t len = 0;
  for (;;) {
    size_t want = cap - 1 - len;
    if (want > 7) want = 7;
    if (want == 0) break;
    ssize_t n = read(fd, buf + len, want);
    if (n < 0) {
      close(fd);
      return -1;
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  close(fd);
  return (long)len;
}

/* The value of "Key:\t..." in a status-like text, or NULL. */
static const char *field(const char *text, const char *key, char *out,
                         size_t cap) {
  size_t klen = strlen(key);
  const char *p = text;
  while (p && *p) {
    if (strncmp(p, key, klen) == 0 && p[klen] == ':') {
      p += klen + 1;
      while (*p == ' ' || *p == '\t') p++;
      size_t n = strcspn(p, "\n");
      if (n >= cap) n = cap - 1;
      memcpy(out, p, n);
      out[n] = 0;
      return out;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return NULL;
}

/* Splits /proc/[pid]/stat after the comm: fields[0] is field 3 (state). */
static int stat_fields(const char *text, char comm[64], char fields[50][32]) {
  const char *open_paren = strchr(text, '(');
  const char *close_paren = strrchr(text, ')');
  if (!open_paren || !close_paren) return -1;
  size_t n = (size_t)(close_paren - open_paren - 1);
  if (n > 63) n = 63;
  memcpy(comm, open_paren + 1, n);
  comm[n] = 0;
  int count = 0;
  const char *p = close_paren + 2;
  while (*p && *p != '\n' && count < 50) {
    size_t len = strcspn(p, " \n");
    if (len > 31) len = 31;
    memcpy(fields[count], p, len);
    fields[count][len] = 0;
    count++;
    p += strcspn(p, " \n");
    if (*p == ' ') p++;
  }
  return count;
}

static long stat_field(const char *path, int n) {
  static char buf[4096], comm[64], f[50][32];
  if (slurp(path, buf, sizeof buf) < 0) return -1;
  if (n == 1) return atol(buf);
  if (stat_fields(buf, comm, f) < n - 2) return -1;
  if (n == 3) return f[0][0];
  return atol(f[n - 3]);
}

static volatile int thread_go;
static pid_t thread_tid;

static void *sleeper(void *arg) {
  (void)arg;
  thread_tid = (pid_t)syscall(SYS_gettid);
  while (!thread_go) usleep(1000);
  return NULL;
}

static char text[1 << 16];

/* A thread that reports its tid and, when told, its own name. */
static struct {
  int tid;
  int go[2], done[2];
  char name[16];
} g_named;

static void *named_thread(void *arg) {
  (void)arg;
  __atomic_store_n(&g_named.tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
  char c;
  if (read(g_named.go[0], &c, 1) != 1) return NULL;
  prctl(PR_GET_NAME, g_named.name);
  (void)!write(g_named.done[1], "d", 1);
  return NULL;
}

/* comm: per thread in task/TID, writable by the process itself (what
 * pthread_setname_np/pthread_getname_np of another thread use), keeping
 * the bytes written, newline included, up to 15; another process's comm
 * is not writable. */
static void test_comm_write(void) {
  char path[128], buf[64];
  int fd = open("/proc/self/comm", O_WRONLY);
  CHECK("comm opens for writing", fd >= 0);
  CHECK("comm write", write(fd, "renamed\n", 8) == 8);
  close(fd);
  CHECK("comm keeps the newline written",
        slurp("/proc/self/comm", buf, sizeof buf) == 9 &&
            strcmp(buf, "renamed\n\n") == 0);
  char pname[16] = {0};
  prctl(PR_GET_NAME, pname);
  CHECK("prctl sees the written comm", strcmp(pname, "renamed\n") == 0);
  fd = open("/proc/self/comm", O_WRONLY);
  CHECK("comm write longer than 15 bytes",
        write(fd, "abcdefghijklmnopqrstuvwxyz", 26) == 26);
  close(fd);
  CHECK("comm is cut to 15 bytes",
        slurp("/proc/self/comm", buf, sizeof buf) > 0 &&
            strcmp(buf, "abcdefghijklmno\n") == 0);

  if (pipe(g_named.go) != 0 || pipe(g_named.done) != 0) return;
  pthread_t th;
  pthread_create(&th, NULL, named_thread, NULL);
  while (__atomic_load_n(&g_named.tid, __ATOMIC_ACQUIRE) == 0) sched_yield();
  snprintf(path, sizeof path, "/proc/self/task/%d/comm", g_named.tid);
  fd = open(path, O_WRONLY);
  CHECK("thread comm write", fd >= 0 && write(fd, "worker", 6) == 6);
  close(fd);
  CHECK("thread comm reads back",
        slurp(path, buf, sizeof buf) > 0 && strcmp(buf, "worker\n") == 0);
  (void)!write(g_named.go[1], "g", 1);
  char c;
  (void)!read(g_named.done[0], &c, 1);
  pthread_join(th, NULL);
  CHECK("the thread's own PR_GET_NAME", strcmp(g_named.name, "worker") == 0);
  CHECK("the process keeps its name",
        slurp("/proc/self/comm", buf, sizeof buf) > 0 &&
            strcmp(buf, "abcdefghijklmno\n") == 0);

  int p[2];
  if (pipe(p) != 0) return;
  pid_t child = fork();
  if (child == 0) {
    close(p[1]);
    (void)!read(p[0], &c, 1);
    _exit(0);
  }
  snprintf(path, sizeof path, "/proc/%d/comm", child);
  fd = open(path, O_WRONLY);
  CHECK_ERRNO("another process's comm is not writable",
              fd >= 0 ? write(fd, "x", 1) : -1, EINVAL);
  if (fd >= 0) close(fd);
  close(p[0]);
  close(p[1]);
  int st;
  waitpid(child, &st, 0);
  prctl(PR_SET_NAME, "procfs");
}

int main(int argc, char **argv) {
  (void)argc;
  char path[PATH_MAX], link[PATH_MAX], val[256];
  const char *base = strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  char want_comm[16];
  snprintf(want_comm, sizeof want_comm, "%s", base);

  /* stat */
  char comm[64], f[50][32];
  CHECK("stat readable", slurp("/proc/self/stat", text, sizeof text) > 0);
  int nf = stat_fields(text, comm, f);
  CHECK("stat has 52 fields", nf == 50);
  CHECK("stat pid == getpid", atol(text) == getpid());
  CHECK("stat comm is the program's", strcmp(comm, want_comm) == 0);
  CHECK("stat state R", strcmp(f[0], "R") == 0);
  CHECK("stat ppid == getppid", atol(f[1]) == getppid());
  CHECK("stat pgrp == getpgrp", atol(f[2]) == getpgrp());
  CHECK("stat session == getsid", atol(f[3]) == getsid(0));
  CHECK("stat num_threads 1", atol(f[17]) == 1);
  CHECK("stat vsize > 0", atol(f[20]) > 0);
  CHECK("stat exit_signal SIGCHLD", atol(f[35]) == SIGCHLD);

  /* status */
  CHECK("status readable", slurp("/proc/self/status", text, sizeof text) > 0);
  CHECK("status Name",
        field(text, "Name", val, sizeof val) && strcmp(val, want_comm) == 0);
  CHECK("status Pid",
        field(text, "Pid", val, sizeof val) && atol(val) == getpid());
  CHECK("status Tgid",
        field(text, "Tgid", val, sizeof val) && atol(val) == getpid());
  CHECK("status PPid",
        field(text, "PPid", val, sizeof val) && atol(val) == getppid());
  CHECK("status State running",
        field(text, "State", val, sizeof val) && val[0] == 'R');
  CHECK("status Threads 1",
        field(text, "Threads", val, sizeof val) && atol(val) == 1);
  CHECK("status VmRSS in kB",
        field(text, "VmRSS", val, sizeof val) && strstr(val, " kB"));
  mode_t old = umask(027);
  slurp("/proc/self/status", text, sizeof text);
  CHECK("status Umask follows umask",
        field(text, "Umask", val, sizeof val) && strcmp(val, "0027") == 0);
  umask(old);

  /* statm */
  CHECK("statm readable", slurp("/proc/self/statm", text, sizeof text) > 0);
  long size = 0, resident = 0;
  CHECK("statm size >= resident > 0",
        sscanf(text, "%ld %ld", &size, &resident) == 2 && size >= resident &&
            resident > 0);

  /* exe, cwd, root */
  ssize_t n = readlink("/proc/self/exe", link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  size_t blen = strlen(base);
  CHECK("readlink exe ends with the program's name",
        n > (ssize_t)blen && link[0] == '/' &&
            strcmp(link + n - blen, base) == 0 && link[n - blen - 1] == '/');
  char exe[PATH_MAX];
  snprintf(exe, sizeof exe, "%s", n > 0 ? link : "");
  int efd = open("/proc/self/exe", O_RDONLY);
  char magic[4] = {0};
  CHECK("open exe reads the ELF", efd >= 0 && read(efd, magic, 4) == 4 &&
                                      memcmp(magic, "\177ELF", 4) == 0);
  if (efd >= 0) close(efd);
  char cwd[PATH_MAX];
  CHECK("chdir /tmp", chdir("/tmp") == 0 && getcwd(cwd, sizeof cwd) != NULL);
  n = readlink("/proc/self/cwd", link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  CHECK("readlink cwd == getcwd", n > 0 && strcmp(link, cwd) == 0);
  n = readlink("/proc/self/root", link, sizeof link - 1);
  CHECK("readlink root is /", n == 1 && link[0] == '/');
  struct stat a, b;
  CHECK("stat cwd link is the cwd",
        stat("/proc/self/cwd", &a) == 0 && stat(".", &b) == 0 &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev);

  /* self, thread-self */
  n = readlink("/proc/self", link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  CHECK("readlink self == getpid", n > 0 && atol(link) == getpid());
  n = readlink("/proc/thread-self", link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  snprintf(path, sizeof path, "%d/task/%ld", getpid(),
           (long)syscall(SYS_gettid));
  CHECK("readlink thread-self is pid/task/tid",
        n > 0 && strcmp(link, path) == 0);

  /* maps */
  CHECK("maps readable", slurp("/proc/self/maps", text, sizeof text) > 0);
  CHECK("maps has [stack]", strstr(text, "[stack]") != NULL);
  CHECK("maps has the executable", exe[0] && strstr(text, exe) != NULL);
  int local = 42;
  char here[64];
  int found = 0;
  for (char *line = text; line && *line;) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 &&
        (uintptr_t)&local >= lo && (uintptr_t)&local < hi) {
      found = perms[0] == 'r' && perms[1] == 'w';
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
  (void)here;
  CHECK("maps: the stack variable is in an rw mapping", found);

  /* mem */
  int mfd = open("/proc/self/mem", O_RDONLY);
  int got = 0;
  CHECK("mem pread of a local",
        mfd >= 0 &&
            pread(mfd, &got, sizeof got, (off_t)(uintptr_t)&local) ==
                sizeof got &&
            got == 42);
  CHECK_ERRNO("mem pread of an unmapped address",
              pread(mfd, &got, sizeof got, 0), EIO);
  if (mfd >= 0) close(mfd);

  /* cmdline, environ, auxv */
  long len = slurp("/proc/self/cmdline", text, sizeof text);
  CHECK("cmdline is argv",
        len == (long)strlen(argv[0]) + 1 && strcmp(text, argv[0]) == 0);
  len = slurp("/proc/self/environ", text, sizeof text);
  int has_alpha = 0;
  for (long i = 0; i < len; i += (long)strlen(text + i) + 1) {
    if (strcmp(text + i, "SBX_ALPHA=alpha") == 0) has_alpha = 1;
  }
  CHECK("environ has SBX_ALPHA", has_alpha);
  len = slurp("/proc/self/auxv", text, sizeof text);
  int pagesz = 0, phdr = 0;
  for (long i = 0; i + 16 <= len; i += 16) {
    uint64_t k, v;
    memcpy(&k, text + i, 8);
    memcpy(&v, text + i + 8, 8);
    if (k == AT_PAGESZ && v == 4096) pagesz = 1;
    if (k == AT_PHDR && v == getauxval(AT_PHDR)) phdr = 1;
  }
  CHECK("auxv has AT_PAGESZ 4096", pagesz);
  CHECK("auxv AT_PHDR == getauxval", phdr);

  /* fd and fdinfo */
  int p[2];
  CHECK("pipe", pipe(p) == 0);
  char tmpl[] = "/tmp/procfs_test_XXXXXX";
  int tfd = mkstemp(tmpl);
  CHECK("mkstemp", tfd >= 0);
  DIR *d = opendir("/proc/self/fd");
  CHECK("opendir fd", d != NULL);
  int listed[1024] = {0}, bad = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (fd < 0 || fcntl(fd, F_GETFD) < 0)
      bad = 1;
    else if (fd < 1024)
      listed[fd] = 1; /* higher ones: inherited, unchecked */
  }
  for (int fd = 0; fd < 1024; fd++) {
    if ((fcntl(fd, F_GETFD) >= 0) != listed[fd]) bad = 1;
  }
  CHECK("fd lists exactly the open descriptors",
        !bad && listed[p[0]] && listed[tfd]);
  if (d) closedir(d);
  snprintf(path, sizeof path, "/proc/self/fd/%d", tfd);
  n = readlink(path, link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  CHECK("readlink fd/N of a file is its path",
        n > 0 && strcmp(link, tmpl) == 0);
  snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
  n = readlink(path, link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  CHECK("readlink fd/N of a pipe is pipe:[ino]",
        n > 6 && strncmp(link, "pipe:[", 6) == 0 && link[n - 1] == ']');
  struct stat ps, ls;
  CHECK("stat fd/N of a pipe is the pipe",
        stat(path, &ls) == 0 && fstat(p[0], &ps) == 0 && S_ISFIFO(ls.st_mode) &&
            ls.st_ino == ps.st_ino);

  CHECK("write the file",
        write(tfd, "abcdef", 6) == 6 && lseek(tfd, 3, SEEK_SET) == 3);
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", tfd);
  CHECK("fdinfo readable", slurp(path, text, sizeof text) > 0);
  CHECK("fdinfo pos", field(text, "pos", val, sizeof val) && atol(val) == 3);
  CHECK("fdinfo flags O_RDWR|O_CLOEXEC",
        field(text, "flags", val, sizeof val) &&
            (strtol(val, NULL, 8) & (O_ACCMODE | O_CLOEXEC)) == O_RDWR);
  snprintf(path, sizeof path, "/proc/self/fd/%d", tfd);
  int again = open(path, O_RDONLY);
  char six[7] = {0};
  CHECK("open fd/N of a file reopens it at offset 0",
        again >= 0 && read(again, six, 6) == 6 && strcmp(six, "abcdef") == 0 &&
            lseek(tfd, 0, SEEK_CUR) == 3);
  if (again >= 0) close(again);

  snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
  int w2 = open(path, O_WRONLY);
  char msg[6] = {0};
  CHECK("open fd/N of a pipe's write end writes the pipe",
        w2 >= 0 && write(w2, "hello", 5) == 5 && read(p[0], msg, 5) == 5 &&
            strcmp(msg, "hello") == 0);
  snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
  int r2 = open(path, O_RDONLY);
  CHECK("open fd/N of a pipe's read end reads the pipe",
        r2 >= 0 && write(p[1], "world", 5) == 5 && read(r2, msg, 5) == 5 &&
            strcmp(msg, "world") == 0);
  int rw = open(path, O_RDWR);
  CHECK("open fd/N of a pipe O_RDWR reads and writes it",
        rw >= 0 && write(rw, "again", 5) == 5 && read(p[0], msg, 5) == 5 &&
            strcmp(msg, "again") == 0 && write(p[1], "twice", 5) == 5 &&
            read(rw, msg, 5) == 5 && strcmp(msg, "twice") == 0);
  if (rw >= 0) close(rw);
  if (w2 >= 0) close(w2);
  if (r2 >= 0) close(r2);

  int sv[2];
  CHECK("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  snprintf(path, sizeof path, "/proc/self/fd/%d", sv[0]);
  n = readlink(path, link, sizeof link - 1);
  if (n >= 0) link[n] = 0;
  CHECK("readlink fd/N of a socket is socket:[ino]",
        n > 8 && strncmp(link, "socket:[", 8) == 0 && link[n - 1] == ']');
  CHECK("stat fd/N of a socket is a socket",
        stat(path, &ls) == 0 && S_ISSOCK(ls.st_mode));
  CHECK_ERRNO("open fd/N of a socket", open(path, O_RDWR), ENXIO);
  close(sv[0]);
  close(sv[1]);
  close(p[0]);
  close(p[1]);
  close(tfd);
  unlink(tmpl);
  snprintf(path, sizeof path, "/proc/self/fd/%d", tfd);
  CHECK_ERRNO("closed fd/N is gone", readlink(path, link, sizeof link), ENOENT);

  /* limits, oom_score_adj, cgroup, mounts */
  CHECK("limits readable", slurp("/proc/self/limits", text, sizeof text) > 0);
  CHECK("limits header",
        strncmp(text, "Limit                     Soft Limit", 36) == 0);
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  char *row = strstr(text, "Max open files");
  CHECK("limits open files == getrlimit",
        row && strtoul(row + 26, NULL, 10) == rl.rlim_cur);
  int ofd = open("/proc/self/oom_score_adj", O_WRONLY);
  CHECK("oom_score_adj write", ofd >= 0 && write(ofd, "100\n", 4) == 4);
  if (ofd >= 0) close(ofd);
  CHECK("oom_score_adj reads back",
        slurp("/proc/self/oom_score_adj", text, sizeof text) > 0 &&
            strcmp(text, "100\n") == 0);
  CHECK("cgroup has a v2 line",
        slurp("/proc/self/cgroup", text, sizeof text) > 0 &&
            (strncmp(text, "0::/", 4) == 0 || strstr(text, "\n0::/")));
  CHECK("mounts has /proc", slurp("/proc/self/mounts", text, sizeof text) > 0 &&
                                strstr(text, " /proc proc ") != NULL);
  CHECK("mountinfo has /proc",
        slurp("/proc/self/mountinfo", text, sizeof text) > 0 &&
            strstr(text, " /proc ") && strstr(text, " - proc "));

  /* system-wide files */
  CHECK("meminfo has MemTotal", slurp("/proc/meminfo", text, sizeof text) > 0 &&
                                    strncmp(text, "MemTotal:", 9) == 0 &&
                                    strstr(text, "\nMemFree:"));
  CHECK("cpuinfo has processor 0",
        slurp("/proc/cpuinfo", text, sizeof text) > 0 &&
            strncmp(text, "processor\t: 0", 13) == 0);
  double up = -1, idle = -1;
  CHECK("uptime has two numbers",
        slurp("/proc/uptime", text, sizeof text) > 0 &&
            sscanf(text, "%lf %lf", &up, &idle) == 2 && up >= 0 && idle >= 0);
  struct sysinfo sinfo;
  CHECK("sysinfo uptime agrees with /proc/uptime",
        sysinfo(&sinfo) == 0 && (double)sinfo.uptime >= up - 2 &&
            (double)sinfo.uptime <= up + 2);
  CHECK("vmstat has nr_free_pages",
        slurp("/proc/vmstat", text, sizeof text) > 0 &&
            strncmp(text, "nr_free_pages ", 14) == 0);
  double l1;
  int running = 0, total = 0;
  CHECK("loadavg fields",
        slurp("/proc/loadavg", text, sizeof text) > 0 &&
            sscanf(text, "%lf %*f %*f %d/%d", &l1, &running, &total) == 3 &&
            running >= 1 && total >= running);
  CHECK("stat has cpu and btime", slurp("/proc/stat", text, sizeof text) > 0 &&
                                      strncmp(text, "cpu ", 4) == 0 &&
                                      strstr(text, "\nbtime "));
  CHECK("version starts with Linux version",
        slurp("/proc/version", text, sizeof text) > 0 &&
            strncmp(text, "Linux version ", 14) == 0);
  CHECK("filesystems lists proc",
        slurp("/proc/filesystems", text, sizeof text) > 0 &&
            strstr(text, "\tproc\n"));
  CHECK("ostype Linux",
        slurp("/proc/sys/kernel/ostype", text, sizeof text) > 0 &&
            strcmp(text, "Linux\n") == 0);
  CHECK("pid_max > getpid",
        slurp("/proc/sys/kernel/pid_max", text, sizeof text) > 0 &&
            atol(text) > getpid());
  CHECK("osrelease readable",
        slurp("/proc/sys/kernel/osrelease", text, sizeof text) > 1);
  CHECK("hostname readable",
        slurp("/proc/sys/kernel/hostname", text, sizeof text) > 1);
  CHECK("overcommit_memory is a mode",
        slurp("/proc/sys/vm/overcommit_memory", text, sizeof text) == 2 &&
            text[0] >= '0' && text[0] <= '2');

  /* the /proc directory lists this process */
  d = opendir("/proc");
  int self_listed = 0, self_link = 0;
  while (d && (e = readdir(d)) != NULL) {
    if (atol(e->d_name) == getpid()) self_listed = 1;
    if (strcmp(e->d_name, "self") == 0) self_link = 1;
  }
  if (d) closedir(d);
  CHECK("/proc lists getpid and self", self_listed && self_link);

  /* threads */
  pthread_t th;
  CHECK("pthread_create", pthread_create(&th, NULL, sleeper, NULL) == 0);
  while (__atomic_load_n(&thread_tid, __ATOMIC_SEQ_CST) == 0) usleep(1000);
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", thread_tid);
  CHECK("task/tid/stat pid is the tid", stat_field(path, 1) == thread_tid);
  CHECK("stat num_threads 2", stat_field("/proc/self/stat", 20) == 2);
  d = opendir("/proc/self/task");
  int tasks = 0;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.') tasks++;
  }
  if (d) closedir(d);
  CHECK("task lists two threads", tasks == 2);
  thread_go = 1;
  pthread_join(th, NULL);

  /* a child, alive then a zombie then gone */
  int go[2];
  CHECK("pipe for the child", pipe(go) == 0);
  pid_t child = fork();
  if (child == 0) {
    char c;
    close(go[1]);
    read(go[0], &c, 1);
    _exit(7);
  }
  close(go[0]);
  snprintf(path, sizeof path, "/proc/%d/stat", child);
  CHECK("child's stat: ppid is us", stat_field(path, 4) == getpid());
  snprintf(path, sizeof path, "/proc/%d/cmdline", child);
  CHECK("child's cmdline is ours until exec",
        slurp(path, text, sizeof text) > 0 && strcmp(text, argv[0]) == 0);
  close(go[1]);
  siginfo_t si;
  memset(&si, 0, sizeof si);
  CHECK("waitid WNOWAIT", waitid(P_PID, child, &si, WEXITED | WNOWAIT) == 0);
  snprintf(path, sizeof path, "/proc/%d/stat", child);
  CHECK("zombie's state is Z", stat_field(path, 3) == 'Z');
  int status;
  CHECK("reap",
        waitpid(child, &status, 0) == child && WEXITSTATUS(status) == 7);
  snprintf(path, sizeof path, "/proc/%d", child);
  CHECK_ERRNO("reaped child's directory is gone", access(path, F_OK), ENOENT);

  test_comm_write();
  return finish();
}
