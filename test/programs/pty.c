/* Pseudo-terminals: posix_openpt/grantpt/unlockpt/ptsname, devpts nodes,
 * the line discipline (canonical editing, echo, raw mode, VMIN/VTIME),
 * window size and SIGWINCH, a session with a controlling terminal, the
 * foreground process group getting ^C, background reads with SIGTTIN
 * ignored, and the hangup when the master closes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "common.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER 0x5441
#endif

/* Reads from fd until `want` bytes came or 2 s passed without data. */
static int read_for(int fd, char *buf, int want) {
  int got = 0;
  while (got < want) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break;
    int r = read(fd, buf + got, want - got);
    if (r <= 0) break;
    got += r;
  }
  buf[got] = 0;
  return got;
}

static int open_pair(int *master, char *name, size_t len) {
  *master = posix_openpt(O_RDWR | O_NOCTTY);
  if (*master < 0) return -1;
  if (grantpt(*master) != 0 || unlockpt(*master) != 0) return -1;
  const char *n = ptsname(*master);
  if (n == NULL) return -1;
  snprintf(name, len, "%s", n);
  return open(name, O_RDWR | O_NOCTTY);
}

static volatile sig_atomic_t g_winch;
static void on_winch(int sig) { (void)sig; g_winch++; }

/* If ^C never reaches the job, it is killed after a while so that the
 * test fails instead of hanging. */
static volatile pid_t g_job;
static void on_alarm(int sig) { (void)sig; kill(g_job, SIGKILL); }

/* The session leader's side: runs in a child of the test. Returns the
 * number of failures. `ready` tells the parent when to type ^C. */
static int session_child(const char *name, int master, int ready) {
  close(master);
  CHECK("setsid", setsid() == getpid());
  CHECK_ERRNO("/dev/tty without a controlling terminal",
              open("/dev/tty", O_RDWR), ENXIO);
  int fd = open(name, O_RDWR | O_NOCTTY);
  CHECK("open replica with O_NOCTTY", fd >= 0);
  pid_t sid = -1;
  CHECK_ERRNO("TIOCGSID before TIOCSCTTY", ioctl(fd, TIOCGSID, &sid), ENOTTY);
  CHECK("TIOCSCTTY", ioctl(fd, TIOCSCTTY, 0) == 0);
  CHECK("TIOCGSID is our session",
        ioctl(fd, TIOCGSID, &sid) == 0 && sid == getpid());
  CHECK("foreground group is ours", tcgetpgrp(fd) == getpgrp());
  {
    /* /proc/self/stat: tty_nr names the terminal (new_encode_dev of its
     * st_rdev), tpgid its foreground group. */
    struct stat ts;
    char sbuf[512] = {0};
    int sf = open("/proc/self/stat", O_RDONLY);
    ssize_t sn = sf >= 0 ? read(sf, sbuf, sizeof sbuf - 1) : -1;
    if (sf >= 0) close(sf);
    char *rp = sn > 0 ? strrchr(sbuf, ')') : NULL;
    int tty_nr = -1, tpgid = 0;
    char st_c;
    int ppid_, pgrp_, sess_;
    if (rp != NULL) sscanf(rp + 2, "%c %d %d %d %d %d", &st_c, &ppid_, &pgrp_, &sess_, &tty_nr, &tpgid);
    fstat(fd, &ts);
    unsigned maj = major(ts.st_rdev), min = minor(ts.st_rdev);
    int want = (int)((min & 0xff) | (maj << 8) | ((min & ~0xffu) << 12));
    CHECK("/proc/self/stat tty_nr is the terminal", tty_nr == want);
    CHECK("/proc/self/stat tpgid is the foreground group", tpgid == getpgrp());
  }
  int t = open("/dev/tty", O_RDWR);
  CHECK("/dev/tty opens the controlling terminal", t >= 0 && isatty(t));
  struct stat a, b;
  /* The description is the terminal's; fstat shows the node it was
   * opened by. */
  CHECK("/dev/tty stats as /dev/tty",
        t >= 0 && fstat(t, &a) == 0 && stat("/dev/tty", &b) == 0 &&
            a.st_rdev == b.st_rdev && a.st_ino == b.st_ino);
  CHECK("/dev/tty reaches the replica",
        t >= 0 && write(t, "", 0) == 0 && tcgetpgrp(t) == getpgrp());
  if (t >= 0) close(t);

  /* Window size: SIGWINCH to the foreground group on a change. */
  signal(SIGWINCH, on_winch);
  struct winsize ws = {30, 100, 0, 0}, got;
  CHECK("TIOCSWINSZ", ioctl(fd, TIOCSWINSZ, &ws) == 0);
  CHECK("SIGWINCH after a resize", g_winch == 1);
  CHECK("TIOCGWINSZ", ioctl(fd, TIOCGWINSZ, &got) == 0 && got.ws_row == 30 &&
                          got.ws_col == 100);
  CHECK("same size again: no SIGWINCH",
        ioctl(fd, TIOCSWINSZ, &ws) == 0 && g_winch == 1);

  /* A job in its own process group in the foreground. */
  int p[2];
  if (pipe(p) != 0) return 1;
  pid_t job = fork();
  if (job == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    if (write(p[1], "j", 1) != 1) _exit(3);
    for (;;) pause();
  }
  char c;
  CHECK("job started", read(p[0], &c, 1) == 1);
  setpgid(job, job);
  CHECK("tcsetpgrp to the job", tcsetpgrp(fd, job) == 0);
  CHECK("tcgetpgrp is the job", tcgetpgrp(fd) == job);
  /* We are in the background now. Reading with SIGTTIN ignored: EIO. */
  signal(SIGTTIN, SIG_IGN);
  char buf[16];
  CHECK_ERRNO("background read with SIGTTIN ignored", read(fd, buf, 1), EIO);
  /* Writing is allowed without TOSTOP. */
  CHECK("background write without TOSTOP", write(fd, "", 0) == 0);
  fflush(stdout);
  if (write(ready, "r", 1) != 1) return 1;  /* the parent types ^C */
  int st = 0;
  g_job = job;
  signal(SIGALRM, on_alarm);
  alarm(10);
  CHECK("job waited for", waitpid(job, &st, 0) == job);
  alarm(0);
  CHECK("^C killed the foreground job with SIGINT",
        WIFSIGNALED(st) && WTERMSIG(st) == SIGINT);
  /* Taking the terminal back from the background with SIGTTOU ignored. */
  signal(SIGTTOU, SIG_IGN);
  CHECK("tcsetpgrp back with SIGTTOU ignored", tcsetpgrp(fd, getpgrp()) == 0);
  CHECK_ERRNO("tcsetpgrp to a missing group", tcsetpgrp(fd, 999999), ESRCH);
  /* The leader giving it up sends SIGHUP and SIGCONT to the foreground
   * group: ours. */
  signal(SIGHUP, SIG_IGN);
  CHECK("TIOCNOTTY", ioctl(fd, TIOCNOTTY) == 0);
  CHECK_ERRNO("TIOCGPGRP after TIOCNOTTY", ioctl(fd, TIOCGPGRP, &sid), ENOTTY);
  CHECK_ERRNO("/dev/tty after TIOCNOTTY", open("/dev/tty", O_RDWR), ENXIO);
  return g_failures;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int m = posix_openpt(O_RDWR | O_NOCTTY);
  CHECK("posix_openpt", m >= 0);
  CHECK("master is a tty", isatty(m) == 1);
  const char *n = ptsname(m);
  CHECK("ptsname is under /dev/pts/", n != NULL && strncmp(n, "/dev/pts/", 9) == 0);
  char name[64];
  snprintf(name, sizeof(name), "%s", n ? n : "");
  unsigned ptn = 0;
  CHECK("TIOCGPTN matches ptsname",
        ioctl(m, TIOCGPTN, &ptn) == 0 && (unsigned)atoi(name + 9) == ptn);
  CHECK_ERRNO("replica is locked before unlockpt", open(name, O_RDWR | O_NOCTTY), EIO);
  CHECK("grantpt", grantpt(m) == 0);
  CHECK("unlockpt", unlockpt(m) == 0);
  int s = open(name, O_RDWR | O_NOCTTY);
  CHECK("open replica", s >= 0);
  CHECK("replica is a tty", isatty(s) == 1);
  struct stat st, fst;
  CHECK("replica node", stat(name, &st) == 0 && S_ISCHR(st.st_mode) &&
                            (st.st_mode & 0600) == 0600 && st.st_uid == getuid());
  CHECK("fstat of the replica is the node",
        fstat(s, &fst) == 0 && fst.st_rdev == st.st_rdev && fst.st_ino == st.st_ino);
  int found = 0;
  DIR *d = opendir("/dev/pts");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, name + 9) == 0) found = 1;
  }
  if (d) closedir(d);
  CHECK("/dev/pts lists the replica", found);
  int peer = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY);
  CHECK("TIOCGPTPEER opens the replica",
        peer >= 0 && fstat(peer, &fst) == 0 && fst.st_rdev == st.st_rdev);
  if (peer >= 0) close(peer);
  CHECK_ERRNO("TIOCGPTN on the replica", ioctl(s, TIOCGPTN, &ptn), ENOTTY);

  /* Canonical mode with ^H as ERASE. */
  struct termios tio;
  CHECK("tcgetattr", tcgetattr(s, &tio) == 0);
  CHECK("default: canonical, echo, signals",
        (tio.c_lflag & (ICANON | ECHO | ISIG)) == (ICANON | ECHO | ISIG));
  CHECK("default: ICRNL and OPOST|ONLCR", (tio.c_iflag & ICRNL) &&
                                               (tio.c_oflag & (OPOST | ONLCR)) == (OPOST | ONLCR));
  tio.c_cc[VERASE] = '\b';
  CHECK("tcsetattr", tcsetattr(s, TCSANOW, &tio) == 0);
  CHECK("write to master", write(m, "hellp\bo\r", 8) == 8);
  char buf[256];
  int avail = -1;
  struct pollfd pf = {s, POLLIN, 0};
  CHECK("replica readable", poll(&pf, 1, 2000) == 1 && (pf.revents & POLLIN));
  CHECK("FIONREAD on the replica", ioctl(s, FIONREAD, &avail) == 0 && avail == 6);
  int r = read(s, buf, sizeof(buf));
  CHECK("canonical read with ^H editing", r == 6 && memcmp(buf, "hello\n", 6) == 0);
  const char *echo = "hellp\b \bo\r\n";
  r = read_for(m, buf, strlen(echo));
  CHECK("echo on the master", r == (int)strlen(echo) && strcmp(buf, echo) == 0);
  write(m, "junk\x15ok\n", 8);
  r = read(s, buf, sizeof(buf));
  CHECK("KILL erases the line", r == 3 && memcmp(buf, "ok\n", 3) == 0);
  read_for(m, buf, strlen("junk\b \b\b \b\b \b\b \bok\r\n"));
  CHECK("KILL echo", strcmp(buf, "junk\b \b\b \b\b \b\b \bok\r\n") == 0);
  write(m, "ab\x04", 3);
  r = read(s, buf, sizeof(buf));
  CHECK("EOF ends a line", r == 2 && memcmp(buf, "ab", 2) == 0);
  write(m, "\x04", 1);
  CHECK("EOF at the start of a line reads 0", read(s, buf, sizeof(buf)) == 0);
  read_for(m, buf, 2);
  CHECK("replica write: NL becomes CRNL", write(s, "out\n", 4) == 4 &&
                                              read_for(m, buf, 5) == 5 &&
                                              strcmp(buf, "out\r\n") == 0);
  int ep = epoll_create1(0);
  struct epoll_event ev = {EPOLLIN, {0}}, evs[2];
  CHECK("epoll on the master", ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, m, &ev) == 0 &&
                                   epoll_wait(ep, evs, 2, 0) == 0);
  write(s, "e", 1);
  CHECK("epoll: master readable after a replica write",
        epoll_wait(ep, evs, 2, 2000) == 1 && (evs[0].events & EPOLLIN));
  read_for(m, buf, 1);
  close(ep);
  int one = 1, zero = 0;
  CHECK("TIOCPKT on", ioctl(m, TIOCPKT, &one) == 0);
  write(s, "p", 1);
  r = read_for(m, buf, 2);
  CHECK("packet mode: a data packet", r == 2 && buf[0] == TIOCPKT_DATA && buf[1] == 'p');
  CHECK("TIOCPKT off", ioctl(m, TIOCPKT, &zero) == 0);
  int fl = fcntl(s, F_GETFL);
  fcntl(s, F_SETFL, fl | O_NONBLOCK);
  CHECK_ERRNO("nonblocking read without a line", read(s, buf, 1), EAGAIN);
  fcntl(s, F_SETFL, fl);

  /* Raw mode. */
  struct termios raw = tio;
  cfmakeraw(&raw);
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  CHECK("cfmakeraw", tcsetattr(s, TCSANOW, &raw) == 0);
  write(m, "a\rb", 3);
  r = read_for(s, buf, 3);
  CHECK("raw read keeps CR", r == 3 && memcmp(buf, "a\rb", 3) == 0);
  write(s, "x\n", 2);
  r = read_for(m, buf, 2);
  CHECK("raw write keeps NL", r == 2 && memcmp(buf, "x\n", 2) == 0);
  raw.c_cc[VMIN] = 0;
  CHECK("VMIN 0 VTIME 0", tcsetattr(s, TCSANOW, &raw) == 0 && read(s, buf, 1) == 0);
  raw.c_cc[VTIME] = 1;
  tcsetattr(s, TCSANOW, &raw);
  CHECK("VMIN 0 VTIME 1 times out with 0", read(s, buf, 1) == 0);
  raw.c_cc[VMIN] = 3;
  raw.c_cc[VTIME] = 0;
  tcsetattr(s, TCSANOW, &raw);
  write(m, "xyz", 3);
  r = read(s, buf, 8);
  CHECK("VMIN 3", r == 3 && memcmp(buf, "xyz", 3) == 0);
  write(m, "q", 1);
  CHECK("TCFLSH drops input", tcflush(s, TCIFLUSH) == 0 &&
                                  ioctl(s, FIONREAD, &avail) == 0 && avail == 0);
  CHECK("TIOCOUTQ", ioctl(s, TIOCOUTQ, &avail) == 0 && avail == 0);
  CHECK("back to canonical", tcsetattr(s, TCSANOW, &tio) == 0);

  /* A session with this terminal: a child becomes its leader. */
  int ready[2];
  if (pipe(ready) != 0) return 1;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    close(s);
    int f = session_child(name, m, ready[1]);
    fflush(stdout);
    _exit(f);
  }
  close(ready[1]);
  char c;
  if (read(ready[0], &c, 1) == 1) write(m, "\x03", 1);
  int wst = 0;
  waitpid(child, &wst, 0);
  CHECK("session child passed", WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
  r = read_for(m, buf, 2);
  CHECK("^C echoed as ^C", r == 2 && strcmp(buf, "^C") == 0);
  close(s);
  close(m);
  CHECK_ERRNO("node gone after both ends closed", stat(name, &st), ENOENT);

  /* Hangup: the master closes under an open replica. */
  int m2;
  char name2[64];
  int s2 = open_pair(&m2, name2, sizeof(name2));
  CHECK("second pair", s2 >= 0);
  write(s2, "left", 4);
  close(m2);
  CHECK_ERRNO("node gone after the master closed", stat(name2, &st), ENOENT);
  CHECK("replica read after hangup is EOF", read(s2, buf, sizeof(buf)) == 0);
  CHECK_ERRNO("replica write after hangup", write(s2, "x", 1), EIO);
  pf.fd = s2;
  pf.events = POLLIN;
  CHECK("replica poll after hangup: POLLHUP",
        poll(&pf, 1, 0) == 1 && (pf.revents & POLLHUP));
  close(s2);

  /* A session leader that opens a terminal without O_NOCTTY acquires it;
   * when it exits, its foreground job gets SIGHUP. The job holds a pipe
   * open: EOF on it means the job died. */
  int m4;
  char name4[64];
  int s4 = open_pair(&m4, name4, sizeof(name4));
  close(s4);
  int jp[2], rp[2];
  if (pipe(jp) != 0 || pipe(rp) != 0) return 1;
  fflush(stdout);
  pid_t leader = fork();
  if (leader == 0) {
    close(jp[0]);
    setsid();
    int fd = open(name4, O_RDWR);
    int ok = fd >= 0 && tcgetpgrp(fd) == getpid();
    pid_t job = fork();
    if (job == 0) {
      setpgid(0, 0);
      if (write(rp[1], "j", 1) != 1) _exit(3);
      for (;;) pause();
    }
    char c;
    close(jp[1]);
    if (read(rp[0], &c, 1) != 1) ok = 0;
    setpgid(job, job);
    if (tcsetpgrp(fd, job) != 0) ok = 0;
    _exit(ok ? 0 : 1);
  }
  close(jp[1]);
  close(rp[1]);
  waitpid(leader, &wst, 0);
  CHECK("open without O_NOCTTY makes the controlling terminal",
        WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
  pf.fd = jp[0];
  pf.events = POLLIN;
  CHECK("the leader's exit hangs up its foreground job",
        poll(&pf, 1, 5000) == 1 && read(jp[0], buf, 1) == 0);
  close(jp[0]);
  close(rp[0]);
  close(m4);

  /* The master sees EIO once the replica is closed. */
  int m3;
  char name3[64];
  int s3 = open_pair(&m3, name3, sizeof(name3));
  close(s3);
  CHECK_ERRNO("master read after the replica closed", read(m3, buf, 1), EIO);
  CHECK("master write without a replica", write(m3, "z\n", 2) == 2);
  pf.fd = m3;
  CHECK("master poll: POLLHUP", poll(&pf, 1, 0) == 1 && (pf.revents & POLLHUP));
  close(m3);
  return finish();
}
