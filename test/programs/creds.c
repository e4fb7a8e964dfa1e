/* Credentials as Linux keeps them, for a process that is root in its user
 * namespace: set*id transitions and what they do to capabilities
 * (keep-caps, securebits, setfsuid), capget/capset, ambient and bounding
 * sets, supplementary groups, /proc/self/status, kill permission between
 * users, file permission checks by mode, owner and group, chown/chmod
 * rules, set-group-ID directories, sticky directories and a set-user-ID
 * program.  Every scenario runs in a forked child, so each starts as root
 * with every capability.  Must run as root (natively: real root).
 *
 * With argument "report" it prints its own ids and capability relations
 * (what an exec'd program runs with).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_IS_SET 1
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_LOWER 3
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

#define CAP_CHOWN 0
#define CAP_DAC_OVERRIDE 1
#define CAP_KILL 5
#define CAP_SETGID 6
#define CAP_SETUID 7
#define CAP_NET_RAW 13
#define CAP_SYS_TIME 25

struct cap_header {
  uint32_t version;
  int pid;
};
struct cap_data {
  uint32_t effective, permitted, inheritable;
};

static uint64_t all_caps;
static char self_exe[4096];
static char dir[256];

/* The bounding set: what root holds here (a native run may be in a
 * container with fewer capabilities than the kernel knows). */
static uint64_t bounding_set(void) {
  uint64_t set = 0;
  for (int n = 0; n < 64; n++) {
    int r = prctl(PR_CAPBSET_READ, n, 0, 0, 0);
    if (r < 0) break;
    if (r == 1) set |= 1ull << n;
  }
  return set;
}

static int get_caps(uint64_t *eff, uint64_t *prm, uint64_t *inh) {
  struct cap_header h = {0x20080522, 0};
  struct cap_data d[2];
  if (syscall(SYS_capget, &h, d) != 0) return -1;
  *eff = d[0].effective | (uint64_t)d[1].effective << 32;
  *prm = d[0].permitted | (uint64_t)d[1].permitted << 32;
  *inh = d[0].inheritable | (uint64_t)d[1].inheritable << 32;
  return 0;
}

static int set_caps(uint64_t eff, uint64_t prm, uint64_t inh) {
  struct cap_header h = {0x20080522, 0};
  struct cap_data d[2] = {{(uint32_t)eff, (uint32_t)prm, (uint32_t)inh},
                          {(uint32_t)(eff >> 32), (uint32_t)(prm >> 32),
                           (uint32_t)(inh >> 32)}};
  return (int)syscall(SYS_capset, &h, d);
}

static const char *rel(uint64_t v) {
  if (v == all_caps) return "all";
  if (v == 0) return "none";
  return "some";
}

static void print_caps(const char *what) {
  uint64_t e, p, i;
  get_caps(&e, &p, &i);
  printf("%s: eff=%s prm=%s inh=%s\n", what, rel(e), rel(p), rel(i));
}

static void print_ids(const char *what) {
  uid_t r, e, s;
  gid_t rg, eg, sg;
  getresuid(&r, &e, &s);
  getresgid(&rg, &eg, &sg);
  printf("%s: uid %u %u %u gid %u %u %u\n", what, r, e, s, rg, eg, sg);
}

/* The Uid/Gid/Groups lines of /proc/self/status, and whether the Cap*
 * lines agree with capget. */
static void print_status(const char *what) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) {
    printf("%s: no status\n", what);
    return;
  }
  char line[512];
  unsigned long long prm = 0, eff = 0, amb = 0;
  while (fgets(line, sizeof(line), f)) {
    if (!strncmp(line, "Uid:", 4) || !strncmp(line, "Gid:", 4) ||
        !strncmp(line, "Groups:", 7)) {
      printf("%s: %s", what, line);
    }
    sscanf(line, "CapPrm: %llx", &prm);
    sscanf(line, "CapEff: %llx", &eff);
    sscanf(line, "CapAmb: %llx", &amb);
  }
  fclose(f);
  uint64_t e, p, i;
  get_caps(&e, &p, &i);
  printf("%s: status caps agree: %s (amb=%s)\n", what,
         (e == eff && p == prm) ? "yes" : "no", rel(amb));
}

static int run(const char *name, void (*fn)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    fn();
    fflush(stdout);
    _exit(g_failures ? 1 : 0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("%s: FAIL (child status %d)\n", name, st);
    g_failures++;
  }
  return 0;
}

static void drop_to(uid_t uid, gid_t gid) {
  gid_t none[1] = {0};
  CHECK("setgroups(0)", setgroups(0, none) == 0);
  CHECK("setresgid", setresgid(gid, gid, gid) == 0);
  CHECK("setresuid", setresuid(uid, uid, uid) == 0);
}

static void t_setuid_drops_caps(void) {
  print_caps("root");
  CHECK("root setgroups", setgroups(2, (gid_t[]){7, 3}) == 0);
  gid_t g[8];
  int n = getgroups(8, g);
  printf("getgroups: %d:", n);
  for (int i = 0; i < n; i++) printf(" %u", g[i]);
  printf("\n");
  CHECK_ERRNO("getgroups too small", getgroups(1, g), EINVAL);
  CHECK("getgroups(0)", getgroups(0, NULL) == 2);
  print_status("groups");
  CHECK("setresgid 100", setresgid(100, 100, 100) == 0);
  CHECK("setresuid 1000", setresuid(1000, 1000, 1000) == 0);
  print_ids("dropped");
  print_caps("dropped");
  print_status("dropped");
  CHECK_ERRNO("setuid(0) after drop", setuid(0), EPERM);
  CHECK_ERRNO("setgroups after drop", setgroups(0, g), EPERM);
  CHECK_ERRNO("setgid(5) after drop", setgid(5), EPERM);
  CHECK_ERRNO("setresuid(5)", setresuid(5, -1, -1), EPERM);
  CHECK("setuid(1000) same", setuid(1000) == 0);
  CHECK_ERRNO("capset raise", set_caps(1, 1, 0), EPERM);
}

static void t_seteuid(void) {
  CHECK("seteuid 1000", setresuid(-1, 1000, -1) == 0);
  print_ids("seteuid");
  print_caps("seteuid");
  CHECK("seteuid back to 0", seteuid(0) == 0);
  print_caps("seteuid back");
  CHECK("setreuid(1000,2000)", setreuid(1000, 2000) == 0);
  print_ids("setreuid");
  print_caps("setreuid");
  CHECK_ERRNO("setreuid(0) unprivileged", setreuid(-1, 3000), EPERM);
}

static void t_keepcaps(void) {
  CHECK("PR_GET_KEEPCAPS 0", prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0) == 0);
  CHECK("PR_SET_KEEPCAPS", prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0);
  CHECK("PR_GET_KEEPCAPS 1", prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0) == 1);
  CHECK("securebits has keep_caps", prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) == 0x10);
  CHECK_ERRNO("PR_SET_KEEPCAPS 2", prctl(PR_SET_KEEPCAPS, 2, 0, 0, 0), EINVAL);
  CHECK("setresuid 1000 (keepcaps)", setresuid(1000, 1000, 1000) == 0);
  print_caps("keepcaps");
  uint64_t e, p, i;
  get_caps(&e, &p, &i);
  CHECK("capset eff = prm", set_caps(p, p, 0) == 0);
  print_caps("keepcaps raised");
  /* With CAP_SETUID back in the effective set, uid 0 is allowed again. */
  CHECK("setuid(0) with CAP_SETUID", setresuid(0, 0, 0) == 0);
  print_ids("keepcaps root again");
}

static void t_setfsuid(void) {
  CHECK("setfsuid returns old", setfsuid(1000) == 0);
  CHECK("setfsuid(-1) reads", setfsuid(-1) == 1000);
  uint64_t e, p, i;
  get_caps(&e, &p, &i);
  CHECK("fsuid!=0 drops CAP_CHOWN", !(e & (1ull << CAP_CHOWN)));
  CHECK("fsuid!=0 drops CAP_DAC_OVERRIDE", !(e & (1ull << CAP_DAC_OVERRIDE)));
  CHECK("fsuid!=0 keeps CAP_KILL", (e & (1ull << CAP_KILL)) != 0);
  CHECK("setfsuid(0) back", setfsuid(0) == 1000);
  get_caps(&e, &p, &i);
  CHECK("fsuid 0 restores", e == all_caps);
  CHECK("setfsgid", setfsgid(55) == 0 && setfsgid(-1) == 55);
}

static void t_capset(void) {
  uint64_t nr = 1ull << CAP_NET_RAW;
  CHECK("capset drop NET_RAW", set_caps(all_caps & ~nr, all_caps & ~nr, 0) == 0);
  print_caps("dropped net_raw");
  CHECK_ERRNO("capset re-add prm", set_caps(all_caps & ~nr, all_caps, 0), EPERM);
  CHECK_ERRNO("capset eff > prm", set_caps(nr, 0, 0), EPERM);
  struct cap_header h = {0x12345678, 0};
  struct cap_data d[2];
  CHECK_ERRNO("capget bad version", syscall(SYS_capget, &h, d), EINVAL);
  CHECK("bad version rewritten", h.version == 0x20080522);
  h.version = 0x12345678;
  CHECK("capget probe (null data)", syscall(SYS_capget, &h, NULL) == 0);
  h.version = 0x20080522;
  h.pid = getppid();
  CHECK("capget of parent", syscall(SYS_capget, &h, d) == 0 &&
                                d[0].effective == (uint32_t)all_caps);
}

static void t_ambient(void) {
  CHECK_ERRNO("ambient raise without inh",
              prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0), EPERM);
  CHECK("capset inh", set_caps(all_caps, all_caps, 1ull << CAP_NET_RAW) == 0);
  CHECK("ambient raise",
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) == 0);
  CHECK("ambient is_set",
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_RAW, 0, 0) == 1);
  CHECK_ERRNO("ambient bad cap", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, 99, 0, 0),
              EINVAL);
  print_status("ambient");
  /* Keep it over a uid change with keep-caps: setresuid clears ambient. */
  CHECK("ambient lower",
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_NET_RAW, 0, 0) == 0);
  CHECK("ambient raise 2",
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) == 0);
  CHECK("ambient clear", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0);
  CHECK("ambient is_set after clear",
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_RAW, 0, 0) == 0);
}

static void t_bounding(void) {
  CHECK("bset read", prctl(PR_CAPBSET_READ, CAP_SYS_TIME, 0, 0, 0) == 1);
  CHECK("bset drop", prctl(PR_CAPBSET_DROP, CAP_SYS_TIME, 0, 0, 0) == 0);
  CHECK("bset read dropped", prctl(PR_CAPBSET_READ, CAP_SYS_TIME, 0, 0, 0) == 0);
  CHECK_ERRNO("bset bad cap", prctl(PR_CAPBSET_READ, 99, 0, 0, 0), EINVAL);
  CHECK_ERRNO("inh beyond bset",
              set_caps(all_caps, all_caps, 1ull << CAP_SYS_TIME), EPERM);
  drop_to(1000, 1000);
  CHECK_ERRNO("bset drop unprivileged", prctl(PR_CAPBSET_DROP, CAP_KILL, 0, 0, 0), EPERM);
}

/* Exec of the test itself ("report"): what a program runs with. */
static void exec_report(const char *what) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self_exe, self_exe, "report", what, (char *)NULL);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(what, WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void t_exec(void) {
  exec_report("exec as root");
  /* Ambient capabilities survive a uid change (with keep-caps) and exec. */
  CHECK("keepcaps", prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0);
  CHECK("setresuid 1000 (keepcaps)", setresuid(1000, 1000, 1000) == 0);
  uint64_t e, p, i;
  get_caps(&e, &p, &i);
  uint64_t nr = 1ull << CAP_NET_RAW;
  CHECK("capset inh net_raw", set_caps(nr, p, nr) == 0);
  CHECK("ambient raise", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) == 0);
  exec_report("exec uid 1000 ambient");
  CHECK("ambient clear", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0);
  exec_report("exec uid 1000");
}

static void report(const char *what) {
  print_ids(what);
  print_caps(what);
  printf("%s: keepcaps %d ambient net_raw %d\n", what,
         prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0),
         prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_RAW, 0, 0));
  uint64_t e, p, i;
  get_caps(&e, &p, &i);
  printf("%s: eff has net_raw %d\n", what, (int)((e >> CAP_NET_RAW) & 1));
}

static char path_buf[512];
static const char *in_dir(const char *name) {
  snprintf(path_buf, sizeof(path_buf), "%s/%s", dir, name);
  return path_buf;
}

static void write_file(const char *name, int mode, uid_t uid, gid_t gid) {
  int fd = open(in_dir(name), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  if (fd >= 0) {
    if (write(fd, "data\n", 5) != 5) g_failures++;
    close(fd);
  }
  if (chown(in_dir(name), uid, gid) != 0) g_failures++;
  if (chmod(in_dir(name), mode) != 0) g_failures++;
}

static void t_files_as_user(void) {
  drop_to(1000, 1000);
  CHECK_ERRNO("open 0600 root file", open(in_dir("secret"), O_RDONLY), EACCES);
  CHECK_ERRNO("access R_OK 0600", access(in_dir("secret"), R_OK), EACCES);
  CHECK("access F_OK", access(in_dir("secret"), F_OK) == 0);
  int fd = open(in_dir("public"), O_RDONLY);
  CHECK("open 0644 for reading", fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_ERRNO("open 0644 for writing", open(in_dir("public"), O_WRONLY), EACCES);
  CHECK_ERRNO("O_TRUNC 0644", open(in_dir("public"), O_RDONLY | O_TRUNC), EACCES);
  fd = open(in_dir("groupfile"), O_RDWR);
  CHECK_ERRNO("0060 owner-group mismatch: owner bits rule", fd, EACCES);
  CHECK_ERRNO("search 0700 dir", open(in_dir("private/inner"), O_RDONLY), EACCES);
  CHECK_ERRNO("list 0700 dir", open(in_dir("private"), O_RDONLY | O_DIRECTORY), EACCES);
  CHECK_ERRNO("create in root dir", open(in_dir("new"), O_CREAT | O_WRONLY, 0644), EACCES);
  CHECK_ERRNO("mkdir in root dir", mkdir(in_dir("newdir"), 0755), EACCES);
  CHECK_ERRNO("unlink in root dir", unlink(in_dir("public")), EACCES);
  CHECK_ERRNO("exec 0644", execl(in_dir("public"), "x", (char *)NULL), EACCES);
  CHECK_ERRNO("chmod not owner", chmod(in_dir("public"), 0777), EPERM);
  struct timespec times[2] = {{1000, 0}, {1000, 0}};
  CHECK_ERRNO("utimensat not owner", utimensat(AT_FDCWD, in_dir("public"), times, 0), EPERM);
  CHECK_ERRNO("touch without write", utimensat(AT_FDCWD, in_dir("public"), NULL, 0), EACCES);
  CHECK("touch own file", utimensat(AT_FDCWD, in_dir("mine/f"), times, 0) == 0);
  CHECK_ERRNO("chown not root", chown(in_dir("mine/f"), 0, 0), EPERM);
  /* Files made here belong to the fsuid/fsgid. */
  fd = open(in_dir("mine/made"), O_CREAT | O_WRONLY, 0640);
  CHECK("create in own dir", fd >= 0);
  if (fd >= 0) close(fd);
  struct stat st;
  CHECK("new file owner", stat(in_dir("mine/made"), &st) == 0 && st.st_uid == 1000 &&
                              st.st_gid == 1000);
  /* A write by someone without CAP_FSETID drops set-user-ID. */
  CHECK("chmod 4755 own file", chmod(in_dir("mine/made"), 04755) == 0);
  fd = open(in_dir("mine/made"), O_WRONLY);
  CHECK("write own set-user-ID file", fd >= 0 && write(fd, "x", 1) == 1);
  if (fd >= 0) close(fd);
  CHECK("write dropped S_ISUID", stat(in_dir("mine/made"), &st) == 0 &&
                                     (st.st_mode & 07777) == 0755);
  CHECK("chgrp to non-member", chown(in_dir("mine/made"), -1, 4242) == -1 && errno == EPERM);
  /* Set-group-ID directory: group inherited, subdirectories set-gid too. */
  fd = open(in_dir("sgid/f"), O_CREAT | O_WRONLY, 0644);
  CHECK("create in sgid dir", fd >= 0);
  if (fd >= 0) close(fd);
  CHECK("sgid dir group", stat(in_dir("sgid/f"), &st) == 0 && st.st_gid == 50);
  CHECK("mkdir in sgid dir", mkdir(in_dir("sgid/d"), 0755) == 0);
  CHECK("sgid subdir", stat(in_dir("sgid/d"), &st) == 0 && st.st_gid == 50 &&
                           (st.st_mode & S_ISGID));
  /* chmod g+s on a file of a group one is not in drops the bit. */
  CHECK("chmod 2755 own file", chmod(in_dir("sgid/f"), 02755) == 0);
  CHECK("sgid dropped", stat(in_dir("sgid/f"), &st) == 0 && !(st.st_mode & S_ISGID));
  /* Sticky directory: another user's file cannot be removed. */
  CHECK_ERRNO("unlink in sticky dir", unlink(in_dir("sticky/rootfile")), EPERM);
  fd = open(in_dir("sticky/userfile"), O_CREAT | O_WRONLY, 0644);
  CHECK("create in sticky dir", fd >= 0);
  if (fd >= 0) close(fd);
  CHECK("unlink own in sticky dir", unlink(in_dir("sticky/userfile")) == 0);
  /* Signals: another user's process is out of reach, one's own is not. */
  CHECK_ERRNO("kill root parent", kill(getppid(), 0), EPERM);
  pid_t c = fork();
  if (c == 0) {
    pause();
    _exit(0);
  }
  CHECK("kill own child", kill(c, SIGKILL) == 0);
  waitpid(c, NULL, 0);
  /* The set-user-ID copy runs with euid 0. */
  exec_report("setuid exec");
}

static void t_root_files(void) {
  struct stat st;
  /* Root: DAC override reads anything; exec still needs an x bit. */
  int fd = open(in_dir("secret"), O_RDONLY);
  CHECK("root reads 0600 of another", fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_ERRNO("root exec 0644", execl(in_dir("public"), "x", (char *)NULL), EACCES);
  write_file("suid", 04755, 0, 0);
  CHECK("chown clears suid", chown(in_dir("suid"), 5, 5) == 0 &&
                                 stat(in_dir("suid"), &st) == 0 &&
                                 !(st.st_mode & S_ISUID));
  /* Without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH root is checked too. */
  uint64_t drop = (1ull << CAP_DAC_OVERRIDE) | (1ull << 2);
  CHECK("capset drop dac", set_caps(all_caps & ~drop, all_caps, 0) == 0);
  CHECK_ERRNO("root without dac", open(in_dir("groupfile"), O_RDONLY), EACCES);
}

static void setup_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/creds_test.%d", getpid());
  mkdir(dir, 0755);
  write_file("secret", 0600, 0, 0);
  write_file("public", 0644, 0, 0);
  write_file("groupfile", 0060, 1000, 1000);
  mkdir(in_dir("private"), 0700);
  write_file("private/inner", 0644, 0, 0);
  mkdir(in_dir("mine"), 0755);
  if (chown(in_dir("mine"), 1000, 1000) != 0) g_failures++;
  write_file("mine/f", 0644, 1000, 1000);
  mkdir(in_dir("sgid"), 0777);
  if (chown(in_dir("sgid"), 0, 50) != 0 || chmod(in_dir("sgid"), 02777) != 0) g_failures++;
  mkdir(in_dir("sticky"), 0777);
  if (chmod(in_dir("sticky"), 01777) != 0) g_failures++;
  write_file("sticky/rootfile", 0644, 0, 0);
  /* A set-user-ID root copy of this program. */
  int in = open(self_exe, O_RDONLY);
  int out = open(in_dir("suidprog"), O_CREAT | O_WRONLY | O_TRUNC, 0755);
  char buf[65536];
  ssize_t n;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0) {
    if (write(out, buf, n) != n) g_failures++;
  }
  close(in);
  close(out);
  if (chmod(in_dir("suidprog"), 04755) != 0) g_failures++;
}

static void cleanup_dir(void) {
  const char *names[] = {"secret", "public", "groupfile", "private/inner", "private",
                         "mine/f", "mine/made", "mine", "sgid/f", "sgid/d", "sgid",
                         "sticky/rootfile", "sticky", "suid", "suidprog", NULL};
  for (int i = 0; names[i]; i++) {
    if (unlink(in_dir(names[i])) != 0) rmdir(in_dir(names[i]));
  }
  rmdir(dir);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "report") == 0) {
    all_caps = bounding_set();
    report(argv[2]);
    return 0;
  }
  if (getuid() != 0) {
    printf("creds: must run as root\nRESULT: FAIL\n");
    return 1;
  }
  all_caps = bounding_set();
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
  if (n <= 0) return 1;
  self_exe[n] = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  run("setuid drops caps", t_setuid_drops_caps);
  run("seteuid", t_seteuid);
  run("keepcaps", t_keepcaps);
  run("setfsuid", t_setfsuid);
  run("capset", t_capset);
  run("ambient", t_ambient);
  run("bounding", t_bounding);
  run("exec", t_exec);
  setup_dir();
  strcpy(self_exe, in_dir("suidprog"));
  run("files as user", t_files_as_user);
  run("root files", t_root_files);
  cleanup_dir();
  return finish();
}
