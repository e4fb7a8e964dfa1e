/* Escape probes: each tries to reach something of the host from inside the
 * sandbox and prints one line,
 *   PROBE <name> held <why>      the host stayed out of reach
 *   PROBE <name> REACHED <what>  it got through
 * (never any byte of the marker file). test/escape/escape.sh runs it in
 * the sandbox, where every probe must hold, and natively against harmless
 * targets (a decoy process and marker of its own), where every probe must
 * reach: a probe that cannot reach natively tests nothing.
 *
 *   escape inside|native canary=PID marker=PATH outside=DIR [blockdev=PATH]
 *          [vmaddr=HEX] [handle=HEX] [abstract=NAME] [tcp=PORT]
 *   escape handle PATH     prints PATH's file handle in hex (native helper)
 *   escape child canary=PID  (after an exec from memfd / tmpfs)
 *
 * stdin is a host file in DIR (the driver redirects it), for the fd probes.
 * "inside" refuses to run unless it is the sandbox's init (pid 1, parent
 * 0): it writes /proc/sys/kernel/hostname and ends with kill(-1, SIGKILL).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_native, g_held, g_reached;
static long g_canary;
static const char *g_marker, *g_outside;

static void result(const char *name, int reached, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static void result(const char *name, int reached, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("PROBE %s %s ", name, reached ? "REACHED" : "held");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  if (reached) g_reached++;
  else g_held++;
}

static const char *arg(int argc, char **argv, const char *key) {
  size_t k = strlen(key);
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=')
      return argv[i] + k + 1;
  return NULL;
}

/* Reads the file at fd: reached when it yields bytes (never printed). */
static int read_some(int fd) {
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return n > 0;
}

/* open(path) and read: 1 when host bytes came back. */
static int open_read(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  return read_some(fd);
}

static void probe_open(const char *name, const char *path) {
  errno = 0;
  int r = open_read(path);
  result(name, r, "%s (%s)", path, r ? "read" : strerror(errno));
}

/* Runs fn in a child process (for probes that change the caller: chroot,
 * mounts, setns); the child's exit status is 1 when it reached. */
static int in_child(int (*fn)(void)) {
  pid_t p = fork();
  if (p == 0) _exit(fn());
  int st = 0;
  if (p < 0 || waitpid(p, &st, 0) != p) return 0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 1;
}

static int chroot_escape(void) {
  mkdir("/tmp/escape-chroot", 0755);
  if (chroot("/tmp/escape-chroot") != 0) return 0;
  for (int i = 0; i < 64; i++) (void)!chdir("..");
  if (chroot(".") != 0) return 0;
  return open_read(g_marker);
}

static int bind_mount(void) {
  if (g_native) {
    if (unshare(CLONE_NEWNS) != 0) return 0;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 0;
  } else {
    (void)!unshare(CLONE_NEWNS);
  }
  const char *dir = g_native ? g_outside : "/tmp/escape-mnt";
  mkdir("/tmp/escape-mnt", 0755);
  if (mount(g_outside, "/tmp/escape-mnt", NULL, MS_BIND, NULL) != 0 &&
      mount("/proc/1/root", "/tmp/escape-mnt", NULL, MS_BIND, NULL) != 0)
    return 0;
  (void)dir;
  char p[4096];
  const char *base = strrchr(g_marker, '/');
  snprintf(p, sizeof p, "/tmp/escape-mnt%s", base ? base : "/marker");
  if (open_read(p)) return 1;
  snprintf(p, sizeof p, "/tmp/escape-mnt%s", g_marker);
  return open_read(p);
}

static char g_setns_path[128];
static int setns_canary(void) {
  int fd = open(g_setns_path, O_RDONLY);
  if (fd < 0) return 0;
  if (setns(fd, 0) != 0) return 0;
  return 1;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static void probe_handle(const char *hex) {
  struct {
    struct file_handle fh;
    unsigned char b[128];
  } h;
  memset(&h, 0, sizeof h);
  if (g_native || !hex) {
    int mount_id;
    h.fh.handle_bytes = 128;
    if (name_to_handle_at(AT_FDCWD, g_marker, &h.fh, &mount_id, 0) != 0) {
      result("open_by_handle_at", 0, "name_to_handle_at: %s",
             strerror(errno));
      return;
    }
  } else {
    /* hex: type (8 hex digits) then the handle's bytes. */
    size_t n = strlen(hex);
    unsigned t = 0;
    for (int i = 0; i < 8 && i < (int)n; i++) t = t * 16 + hexval(hex[i]);
    h.fh.handle_type = (int)t;
    size_t nb = 0;
    unsigned char *b = (unsigned char *)&h.fh + sizeof h.fh;
    for (size_t i = 8; i + 1 < n && nb < 128; i += 2)
      b[nb++] = (unsigned char)(hexval(hex[i]) * 16 + hexval(hex[i + 1]));
    h.fh.handle_bytes = (unsigned)nb;
  }
  int ok = 0;
  int err = 0;
  int mfd[] = {AT_FDCWD, open("/", O_RDONLY | O_DIRECTORY)};
  for (int i = 0; i < 2 && !ok; i++) {
    int fd = open_by_handle_at(mfd[i], &h.fh, O_RDONLY);
    if (fd >= 0) ok = read_some(fd);
    else err = errno;
  }
  if (mfd[1] >= 0) close(mfd[1]);
  result("open_by_handle_at", ok, "the marker's host handle (%s)",
         ok ? "read" : strerror(err));
}

static void probe_openat2(void) {
  struct {
    uint64_t flags, mode, resolve;
  } how = {O_RDONLY, 0, 0x02 /* RESOLVE_NO_MAGICLINKS */};
  int fd = (int)syscall(SYS_openat2, AT_FDCWD, g_marker, &how, sizeof how);
  int e1 = errno, r = fd >= 0 && read_some(fd);
  int root = open("/", O_RDONLY | O_DIRECTORY);
  how.resolve = 0x10; /* RESOLVE_IN_ROOT */
  int fd2 = (int)syscall(SYS_openat2, root, g_marker, &how, sizeof how);
  int r2 = fd2 >= 0 && read_some(fd2);
  char rel[4096];
  snprintf(rel, sizeof rel, "../../../../../../..%s", g_marker);
  how.resolve = 0x08; /* RESOLVE_BENEATH: must refuse ".." out */
  int fd3 = (int)syscall(SYS_openat2, root, rel, &how, sizeof how);
  int r3 = fd3 >= 0 && read_some(fd3);
  if (root >= 0) close(root);
  result("openat2", r || r2 || r3,
         "NO_MAGICLINKS %s, IN_ROOT %s, BENEATH ..: %s",
         r ? "read" : strerror(e1), r2 ? "read" : "no", r3 ? "read" : "no");
}

static void probe_fd_links(void) {
  char link[4096], p[4096];
  ssize_t n = readlink("/proc/self/fd/0", link, sizeof link - 1);
  int r = 0;
  if (n > 0) {
    link[n] = 0;
    char *slash = strrchr(link, '/');
    if (slash) {
      *slash = 0;
      const char *base = strrchr(g_marker, '/');
      snprintf(p, sizeof p, "%s%s", link, base ? base : "");
      r = open_read(p);
    }
  }
  int r2 = open_read("/proc/self/fd/0/../marker");
  /* Reopen stdin (a host file) by its link and walk from it. */
  int fd = open("/proc/self/fd/0", O_RDONLY);
  int r3 = 0;
  if (fd >= 0) {
    int d = openat(fd, "..", O_RDONLY);
    r3 = d >= 0;
    if (d >= 0) close(d);
    close(fd);
  }
  result("fd_links", r || r2 || r3,
         "stdin's link's directory: %s, fd/0/..: %s, openat(stdin, ..): %s",
         r ? "read" : "no", r2 ? "read" : "no", r3 ? "opened" : "no");
}

static void probe_proc_pids(void) {
  char p[4096];
  int r = 0, tried = 0;
  for (int pid = 1; pid <= 64; pid++) {
    for (int k = 0; k < 2; k++) {
      snprintf(p, sizeof p, "/proc/%d/%s%s", pid, k ? "cwd/../../../../.."
                                                    : "root", g_marker);
      tried++;
      r |= open_read(p);
    }
  }
  snprintf(p, sizeof p, "/proc/%ld/root%s", g_canary, g_marker);
  r |= open_read(p);
  result("proc_pid_root_cwd", r, "/proc/{1..64,canary}/{root,cwd}: %d paths",
         tried + 1);
}

static void probe_pids(const char *vmaddr) {
  errno = 0;
  int r = kill((pid_t)g_canary, 0) == 0;
  result("kill_canary", r, "kill(canary, 0): %s", r ? "ok" : strerror(errno));
  if (!g_native) {
    kill((pid_t)g_canary, SIGSTOP);
    kill((pid_t)g_canary, SIGKILL);
    kill(-(pid_t)g_canary, SIGKILL);
  }
  errno = 0;
  r = ptrace(PTRACE_ATTACH, (pid_t)g_canary, 0, 0) == 0;
  int e = errno;
  if (r) {
    waitpid((pid_t)g_canary, NULL, __WALL);
    ptrace(PTRACE_DETACH, (pid_t)g_canary, 0, 0);
  }
  result("ptrace_attach_canary", r, "PTRACE_ATTACH: %s",
         r ? "ok" : strerror(e));
  errno = 0;
  r = ptrace(PTRACE_SEIZE, (pid_t)g_canary, 0, 0) == 0;
  e = errno;
  if (r && ptrace(PTRACE_INTERRUPT, (pid_t)g_canary, 0, 0) == 0) {
    waitpid((pid_t)g_canary, NULL, __WALL);
    ptrace(PTRACE_DETACH, (pid_t)g_canary, 0, 0);
  }
  result("ptrace_seize_canary", r, "PTRACE_SEIZE: %s", r ? "ok" : strerror(e));
  char buf[16];
  struct iovec local = {buf, sizeof buf};
  struct iovec remote = {(void *)strtoul(vmaddr ? vmaddr : "0", NULL, 16),
                         sizeof buf};
  errno = 0;
  r = process_vm_readv((pid_t)g_canary, &local, 1, &remote, 1, 0) > 0;
  result("process_vm_readv_canary", r, "%s", r ? "read" : strerror(errno));
  errno = 0;
  int fd = (int)syscall(SYS_pidfd_open, g_canary, 0);
  result("pidfd_open_canary", fd >= 0, "%s", fd >= 0 ? "ok" : strerror(errno));
  if (fd >= 0) close(fd);
  snprintf(g_setns_path, sizeof g_setns_path, "/proc/%ld/ns/mnt", g_canary);
  r = in_child(setns_canary);
  result("setns_canary", r, "setns(%s)", g_setns_path);
}

/* mknod of a host device's numbers in the sandbox's /tmp, then open it:
 * reached when the node leads to the host's device. */
static void probe_devices(const char *blockdev) {
  unsigned maj = 0, mnr = 0;
  int r = 0, e;
  if (blockdev && sscanf(blockdev, "%u:%u", &maj, &mnr) == 2) {
    unlink("/tmp/escape-blk");
    errno = 0;
    if (mknod("/tmp/escape-blk", S_IFBLK | 0600, makedev(maj, mnr)) == 0)
      r = open_read("/tmp/escape-blk");
    e = errno;
    unlink("/tmp/escape-blk");
    result("mknod_blockdev", r, "mknod b %u:%u + read (%s)", maj, mnr,
           r ? "read" : strerror(e));
  }
  unlink("/tmp/escape-kvm");
  errno = 0;
  int v = -1;
  if (mknod("/tmp/escape-kvm", S_IFCHR | 0600, makedev(10, 232)) == 0) {
    int fd = open("/tmp/escape-kvm", O_RDWR);
    if (fd >= 0) {
      v = ioctl(fd, 0xAE00 /* KVM_GET_API_VERSION */, 0);
      close(fd);
    }
  }
  e = errno;
  unlink("/tmp/escape-kvm");
  result("mknod_dev_kvm", v == 12, "mknod c 10:232 + KVM_GET_API_VERSION "
         "(%d, %s)", v, strerror(e));
  int fd = open("/dev/kvm", O_RDWR);
  e = errno;
  v = fd >= 0 ? ioctl(fd, 0xAE00, 0) : -1;
  result("dev_kvm", v == 12, "open /dev/kvm + KVM_GET_API_VERSION (%d, %s)",
         v, fd >= 0 ? "opened" : strerror(e));
  if (fd >= 0) close(fd);
  const char *const host_devs[] = {"/dev/mem", "/dev/kmem", "/dev/port",
                                   "/dev/vda", "/dev/sda", "/dev/nvme0n1"};
  int opened = 0;
  for (size_t i = 0; i < sizeof host_devs / sizeof host_devs[0]; i++) {
    fd = open(host_devs[i], O_RDONLY);
    if (fd >= 0) {
      opened++;
      close(fd);
    }
  }
  /* Natively these may not exist; inside none may open. */
  if (!g_native)
    result("dev_mem_disks", opened > 0, "/dev/{mem,kmem,port,vda,sda,"
           "nvme0n1}: %d opened", opened);
}

static void probe_proc_sys(void) {
  int fd;
  if (!g_native) {
    fd = open("/proc/sysrq-trigger", O_WRONLY);
    result("proc_sysrq_trigger", fd >= 0, "open for writing: %s",
           fd >= 0 ? "opened" : strerror(errno));
    if (fd >= 0) close(fd);
  }
  fd = open("/proc/sys/kernel/hostname", O_WRONLY);
  if (fd < 0) {
    result("proc_sys_write", 0, "open for writing: %s", strerror(errno));
    return;
  }
  if (g_native) {
    close(fd);
    result("proc_sys_write", 1, "opened for writing (not written)");
    return;
  }
  ssize_t n = write(fd, "escaped", 7);
  close(fd);
  /* Written inside: the sandbox's own hostname at most; the driver
   * compares the host's. */
  result("proc_sys_write", 0, "wrote %zd bytes (the driver checks the host)",
         n);
}

static void probe_unix(const char *abstract) {
  char path[4096];
  snprintf(path, sizeof path, "%s/host.sock", g_outside);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%.100s", path);
  errno = 0;
  int r = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
  result("unix_connect_host_path", r, "%s", r ? "connected" : strerror(errno));
  close(s);
  if (abstract) {
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t n = strlen(abstract);
    memcpy(a.sun_path + 1, abstract, n);
    errno = 0;
    r = connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) ==
        0;
    result("unix_connect_host_abstract", r, "@%s: %s", abstract,
           r ? "connected" : strerror(errno));
    close(s);
  }
  s = socket(AF_UNIX, SOCK_STREAM, 0);
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%.80s/created.sock", g_outside);
  errno = 0;
  r = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
  /* Inside, a bind can only create a file in the sandbox's own tree (the
   * driver checks the host directory); natively it is created. */
  result("unix_bind_host_path", g_native && r, "bind %s: %s", a.sun_path,
         r ? "bound" : strerror(errno));
  close(s);
}

/* The driver's TCP listener on the host's 127.0.0.1:PORT: the sandbox's
 * loopback is its own. */
static void probe_tcp(const char *port) {
  if (!port) return;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)atoi(port)),
                          .sin_addr = {htonl(INADDR_LOOPBACK)}};
  errno = 0;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int r = s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0;
  result("tcp_connect_host_loopback", r, "127.0.0.1:%s: %s%s", port,
         s < 0 ? "socket: " : "", r ? "connected" : strerror(errno));
  if (s >= 0) close(s);
}

/* The host's cgroup and sysfs files: a write to cgroup.procs would move a
 * process of the host's choosing; natively opened, never written. */
static void probe_sysfs(void) {
  const char *const paths[] = {"/sys/fs/cgroup/memory/cgroup.procs",
                               "/sys/fs/cgroup/pids/cgroup.procs",
                               "/sys/fs/cgroup/cgroup.procs",
                               "/sys/kernel/mm/transparent_hugepage/enabled"};
  int opened = 0;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    int fd = open(paths[i], O_WRONLY);
    if (fd >= 0) {
      opened++;
      close(fd);
    }
  }
  result("sysfs_cgroup_write", opened > 0,
         "cgroup.procs, transparent_hugepage: %d opened for writing", opened);
}

/* Copies /proc/self/exe into fd. */
static int copy_self(int fd) {
  int in = open("/proc/self/exe", O_RDONLY);
  if (in < 0) return -1;
  char buf[65536];
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0)
    if (write(fd, buf, (size_t)n) != n) return -1;
  close(in);
  return 0;
}

/* Execs a copy of this program (memfd, or a file in /dev/shm) in "child"
 * mode: it reaches when the exec'd program sees the host canary. */
static void probe_exec(int memfd) {
  char canary[64];
  snprintf(canary, sizeof canary, "canary=%ld", g_canary);
  int fd;
  const char *path = "/dev/shm/escape-exec";
  if (memfd) {
    fd = (int)syscall(SYS_memfd_create, "escape", 0);
  } else {
    unlink(path);
    fd = open(path, O_RDWR | O_CREAT, 0755);
  }
  if (fd < 0 || copy_self(fd) != 0) {
    result(memfd ? "memfd_exec" : "tmpfs_exec", 0, "no copy: %s",
           strerror(errno));
    return;
  }
  if (!memfd) close(fd);
  pid_t p = fork();
  if (p == 0) {
    char *av[] = {"escape", "child", canary, NULL};
    char *ev[] = {NULL};
    if (memfd) syscall(SYS_execveat, fd, "", av, ev, AT_EMPTY_PATH);
    else execve(path, av, ev);
    _exit(3);
  }
  int st = 0;
  waitpid(p, &st, 0);
  if (memfd) close(fd);
  else unlink(path);
  int ran = WIFEXITED(st) && WEXITSTATUS(st) != 3;
  result(memfd ? "memfd_exec" : "tmpfs_exec",
         WIFEXITED(st) && WEXITSTATUS(st) == 1,
         "exec'd copy %s, %s the canary", ran ? "ran" : "did not run",
         WIFEXITED(st) && WEXITSTATUS(st) == 1 ? "sees" : "does not see");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 3 && strcmp(argv[1], "handle") == 0) {
    struct {
      struct file_handle fh;
      unsigned char b[128];
    } h;
    int mount_id;
    h.fh.handle_bytes = 128;
    if (name_to_handle_at(AT_FDCWD, argv[2], &h.fh, &mount_id, 0) != 0)
      return 1;
    printf("%08x", (unsigned)h.fh.handle_type);
    const unsigned char *b = (const unsigned char *)&h.fh + sizeof h.fh;
    for (unsigned i = 0; i < h.fh.handle_bytes; i++) printf("%02x", b[i]);
    printf("\n");
    return 0;
  }
  const char *c = arg(argc, argv, "canary");
  g_canary = c ? atol(c) : 0;
  if (argc >= 2 && strcmp(argv[1], "child") == 0)
    return g_canary > 0 && kill((pid_t)g_canary, 0) == 0 ? 1 : 0;
  if (argc < 2 || (strcmp(argv[1], "inside") && strcmp(argv[1], "native"))) {
    fprintf(stderr, "usage: escape inside|native canary=PID marker=PATH "
                    "outside=DIR ...\n");
    return 2;
  }
  g_native = strcmp(argv[1], "native") == 0;
  /* "inside" writes /proc/sys and ends with kill(-1, SIGKILL): never on
   * the host. The sandbox's init is pid 1 with parent 0. */
  if (!g_native && (getpid() != 1 || syscall(SYS_getppid) != 0)) {
    fprintf(stderr, "escape: \"inside\" runs only as the sandbox's init "
                    "(pid 1, parent 0); refusing\n");
    return 2;
  }
  g_marker = arg(argc, argv, "marker");
  g_outside = arg(argc, argv, "outside");
  if (!g_canary || !g_marker || !g_outside) {
    fprintf(stderr, "escape: canary=, marker= and outside= are needed\n");
    return 2;
  }
  char p[4096];
  probe_open("open_abs", g_marker);
  snprintf(p, sizeof p, "../../../../../../../../..%s", g_marker);
  probe_open("open_dotdot", p);
  unlink("/tmp/escape-link");
  (void)!symlink(g_marker, "/tmp/escape-link");
  probe_open("symlink_abs", "/tmp/escape-link");
  snprintf(p, sizeof p, "/proc/self/root%s", g_marker);
  probe_open("proc_self_root", p);
  /* Natively the host's pid 1 may be out of reach (another user
   * namespace): the decoy is the harmless target there. */
  snprintf(p, sizeof p, "/proc/%ld/root%s", g_native ? g_canary : 1,
           g_marker);
  probe_open("proc_1_root", p);
  snprintf(p, sizeof p, "/proc/self/cwd/../../../../../..%s", g_marker);
  probe_open("proc_self_cwd", p);
  probe_proc_pids();
  probe_fd_links();
  probe_openat2();
  probe_handle(arg(argc, argv, "handle"));
  result("bind_mount", in_child(bind_mount), "mount --bind of the host "
         "directory or /proc/1/root");
  result("chroot_escape", in_child(chroot_escape), "chroot + ../.. + chroot .");
  probe_pids(arg(argc, argv, "vmaddr"));
  probe_devices(arg(argc, argv, "blockdev"));
  probe_proc_sys();
  probe_unix(arg(argc, argv, "abstract"));
  probe_tcp(arg(argc, argv, "tcp"));
  probe_sysfs();
  probe_exec(1);
  probe_exec(0);
  if (!g_native) {
    /* Last: every process the sandbox can signal. */
    errno = 0;
    int r = kill(-1, SIGKILL);
    result("kill_all", 0, "kill(-1, SIGKILL) = %d (the driver checks the "
           "canary)", r);
  }
  printf("ESCAPE probes=%d held=%d reached=%d\n", g_held + g_reached, g_held,
         g_reached);
  return 0;
}
