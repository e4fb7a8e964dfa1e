/* AF_UNIX sockets: socketpair and socket/bind/listen/connect/accept for
 * SOCK_STREAM, SOCK_DGRAM and SOCK_SEQPACKET; path names (in a fresh
 * mkdtemp directory), abstract names (random, never printed) and autobind;
 * message boundaries, MSG_PEEK/DONTWAIT/WAITALL/TRUNC, shutdown, EOF,
 * EPIPE and SIGPIPE, ECONNRESET, backlog, blocking calls between threads,
 * socket options, and the errors Linux gives. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static char g_dir[64];
static char g_abstract[32]; /* without the leading NUL */
static volatile sig_atomic_t g_sigpipes;

static void on_sigpipe(int sig) { (void)sig; g_sigpipes++; }

static socklen_t path_addr(struct sockaddr_un *a, const char *name) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  snprintf(a->sun_path, sizeof a->sun_path, "%s/%s", g_dir, name);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(a->sun_path) + 1);
}

static socklen_t abstract_addr(struct sockaddr_un *a, const char *suffix) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "%s.%s", g_abstract, suffix);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int int_opt(int fd, int name) {
  int v = -12345;
  socklen_t l = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, name, &v, &l) != 0) return -1;
  return v;
}

static void test_pairs(void) {
  int sv[2];
  char buf[64];
  CHECK("socketpair stream", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK("stream write 1", write(sv[0], "hello", 5) == 5);
  CHECK("stream write 2", write(sv[0], " world", 6) == 6);
  int avail = -1;
  CHECK("FIONREAD stream", ioctl(sv[1], FIONREAD, &avail) == 0 && avail == 11);
  CHECK("stream peek", recv(sv[1], buf, sizeof buf, MSG_PEEK) == 11 && memcmp(buf, "hello world", 11) == 0);
  CHECK("stream partial read", read(sv[1], buf, 3) == 3 && memcmp(buf, "hel", 3) == 0);
  CHECK("stream rest merged", read(sv[1], buf, sizeof buf) == 8 && memcmp(buf, "lo world", 8) == 0);
  CHECK_ERRNO("stream MSG_DONTWAIT empty", recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), EAGAIN);
  CHECK_ERRNO("lseek on socket", lseek(sv[0], 0, SEEK_SET), ESPIPE);
  CHECK("F_GETFL O_RDWR", fcntl(sv[0], F_GETFL) == O_RDWR);
  struct stat st;
  CHECK("fstat S_IFSOCK", fstat(sv[0], &st) == 0 && S_ISSOCK(st.st_mode));
  struct sockaddr_un name;
  socklen_t nl = sizeof name;
  CHECK("getsockname of a pair is unnamed", getsockname(sv[0], (struct sockaddr *)&name, &nl) == 0 && nl == sizeof(sa_family_t));
  nl = sizeof name;
  CHECK("getpeername of a pair is unnamed", getpeername(sv[0], (struct sockaddr *)&name, &nl) == 0 && nl == sizeof(sa_family_t));
  close(sv[0]);
  close(sv[1]);

  for (int i = 0; i < 2; i++) {
    int type = i == 0 ? SOCK_DGRAM : SOCK_SEQPACKET;
    const char *tn = i == 0 ? "dgram" : "seqpacket";
    char name[64];
    CHECK(tn, socketpair(AF_UNIX, type | SOCK_NONBLOCK, 0, sv) == 0);
    send(sv[0], "one", 3, 0);
    send(sv[0], "second", 6, 0);
    send(sv[0], "", 0, 0);
    send(sv[0], "fourth", 6, 0);
    snprintf(name, sizeof name, "%s FIONREAD is the next message", tn);
    CHECK(name, ioctl(sv[1], FIONREAD, &avail) == 0 && avail == (i == 0 ? 3 : 15));
    snprintf(name, sizeof name, "%s boundary 1", tn);
    CHECK(name, recv(sv[1], buf, sizeof buf, 0) == 3);
    struct iovec iov = {buf, 2};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    snprintf(name, sizeof name, "%s truncated", tn);
    CHECK(name, recvmsg(sv[1], &m, 0) == 2 && (m.msg_flags & MSG_TRUNC) && memcmp(buf, "se", 2) == 0);
    snprintf(name, sizeof name, "%s empty message", tn);
    CHECK(name, recv(sv[1], buf, sizeof buf, 0) == 0);
    snprintf(name, sizeof name, "%s MSG_TRUNC returns the real size", tn);
    CHECK(name, recv(sv[1], buf, 1, MSG_TRUNC) == 6);
    snprintf(name, sizeof name, "%s empty queue", tn);
    CHECK_ERRNO(name, recv(sv[1], buf, sizeof buf, 0), EAGAIN);
    snprintf(name, sizeof name, "%s F_GETFL O_NONBLOCK", tn);
    CHECK(name, fcntl(sv[1], F_GETFL) == (O_RDWR | O_NONBLOCK));
    close(sv[0]);
    close(sv[1]);
  }
}

static void test_socket_errors(void) {
  int fd;
  CHECK_ERRNO("socket bad flags", socket(AF_UNIX, SOCK_STREAM | 0x1000000, 0), EINVAL);
  CHECK_ERRNO("socket bad protocol", socket(AF_UNIX, SOCK_STREAM, 2), EPROTONOSUPPORT);
  CHECK_ERRNO("socket unknown family", socket(1000, SOCK_STREAM, 0), EAFNOSUPPORT);
  CHECK_ERRNO("socket SOCK_RDM", socket(AF_UNIX, SOCK_RDM, 0), ESOCKTNOSUPPORT);
  int sv[2];
  CHECK_ERRNO("socketpair AF_INET", socketpair(AF_INET, SOCK_STREAM, 0, sv), EOPNOTSUPP);
  fd = socket(AF_UNIX, SOCK_RAW, 0);
  CHECK("SOCK_RAW is SOCK_DGRAM", fd >= 0 && int_opt(fd, SO_TYPE) == SOCK_DGRAM);
  close(fd);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, PF_UNIX);
  CHECK("SOCK_CLOEXEC", fcntl(fd, F_GETFD) == FD_CLOEXEC);
  CHECK("SO_PROTOCOL is 0 even for PF_UNIX", int_opt(fd, SO_PROTOCOL) == 0);
  char c;
  CHECK_ERRNO("read unconnected stream", read(fd, &c, 1), EINVAL);
  CHECK_ERRNO("write unconnected stream", write(fd, &c, 1), ENOTCONN);
  CHECK_ERRNO("listen unbound", listen(fd, 1), EINVAL);
  CHECK_ERRNO("accept not listening", accept(fd, NULL, NULL), EINVAL);
  struct sockaddr_un a;
  socklen_t l = sizeof a;
  CHECK_ERRNO("getpeername unconnected", getpeername(fd, (struct sockaddr *)&a, &l), ENOTCONN);
  CHECK("shutdown unconnected is ok", shutdown(fd, SHUT_RDWR) == 0);
  CHECK_ERRNO("shutdown bad how", shutdown(fd, 3), EINVAL);
  CHECK_ERRNO("bind short address", bind(fd, (struct sockaddr *)&a, 1), EINVAL);
  a.sun_family = AF_INET;
  CHECK_ERRNO("bind wrong family", bind(fd, (struct sockaddr *)&a, 4), EINVAL);
  CHECK_ERRNO("bind on a non-socket", bind(0, (struct sockaddr *)&a, 4), ENOTSOCK);
  close(fd);
  fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  CHECK_ERRNO("listen dgram", listen(fd, 1), EOPNOTSUPP);
  CHECK_ERRNO("accept dgram", accept(fd, NULL, NULL), EOPNOTSUPP);
  CHECK_ERRNO("send unconnected dgram", send(fd, "x", 1, 0), ENOTCONN);
  CHECK_ERRNO("dgram MSG_OOB", send(fd, "x", 1, MSG_OOB), EOPNOTSUPP);
  close(fd);
}

static void test_options(void) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  CHECK("SO_TYPE", int_opt(fd, SO_TYPE) == SOCK_SEQPACKET);
  CHECK("SO_DOMAIN", int_opt(fd, SO_DOMAIN) == AF_UNIX);
  CHECK("SO_PROTOCOL", int_opt(fd, SO_PROTOCOL) == 0);
  CHECK("SO_ERROR", int_opt(fd, SO_ERROR) == 0);
  CHECK("SO_ACCEPTCONN", int_opt(fd, SO_ACCEPTCONN) == 0);
  CHECK("SO_PASSCRED default", int_opt(fd, SO_PASSCRED) == 0);
  int v = 1;
  CHECK("set SO_PASSCRED", setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &v, sizeof v) == 0 && int_opt(fd, SO_PASSCRED) == 1);
  CHECK("set SO_REUSEADDR", setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, sizeof v) == 0 && int_opt(fd, SO_REUSEADDR) == 1);
  v = 65536;
  CHECK("SO_SNDBUF doubled", setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v) == 0 && int_opt(fd, SO_SNDBUF) == 131072);
  v = 32768;
  CHECK("SO_RCVBUF doubled", setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v) == 0 && int_opt(fd, SO_RCVBUF) == 65536);
  CHECK_ERRNO("set SO_TYPE", setsockopt(fd, SOL_SOCKET, SO_TYPE, &v, sizeof v), ENOPROTOOPT);
  CHECK_ERRNO("short optlen", setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &v, 2), EINVAL);
  socklen_t l = sizeof v;
  CHECK_ERRNO("getsockopt SOL_IP", getsockopt(fd, 0 /* SOL_IP */, 1, &v, &l), EOPNOTSUPP);
  short s = 0;
  l = sizeof s;
  CHECK("getsockopt short buffer", getsockopt(fd, SOL_SOCKET, SO_TYPE, &s, &l) == 0 && l == 2 && s == SOCK_SEQPACKET);
  struct ucred uc;
  l = sizeof uc;
  CHECK("SO_PEERCRED unconnected", getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0 && l == sizeof uc &&
        uc.pid == 0 && uc.uid == (uid_t)-1 && uc.gid == (gid_t)-1);
  struct timeval tv = {0, 0};
  l = sizeof tv;
  CHECK("SO_RCVTIMEO default", getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0 && l == sizeof tv && tv.tv_sec == 0 && tv.tv_usec == 0);
  tv.tv_usec = 2000000;
  CHECK_ERRNO("SO_RCVTIMEO bad usec", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), EDOM);
  close(fd);

  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  l = sizeof uc;
  CHECK("SO_PEERCRED socketpair", getsockopt(sv[0], SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0 &&
        uc.pid == getpid() && uc.uid == getuid() && uc.gid == getgid());
  tv.tv_sec = 0;
  tv.tv_usec = 20000;
  CHECK("set SO_RCVTIMEO", setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  char c;
  CHECK_ERRNO("SO_RCVTIMEO expires", read(sv[0], &c, 1), EAGAIN);
  close(sv[0]);
  close(sv[1]);
}

static void test_paths(void) {
  struct sockaddr_un a, got;
  socklen_t alen = path_addr(&a, "srv");
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK("bind path", bind(l, (struct sockaddr *)&a, alen) == 0);
  struct stat st;
  CHECK("bound path is a socket", stat(a.sun_path, &st) == 0 && S_ISSOCK(st.st_mode));
  socklen_t gl = sizeof got;
  CHECK("getsockname path", getsockname(l, (struct sockaddr *)&got, &gl) == 0 && gl == alen &&
        strcmp(got.sun_path, a.sun_path) == 0);
  int other = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK_ERRNO("bind path in use", bind(other, (struct sockaddr *)&a, alen), EADDRINUSE);
  /* The name is looked at before the socket: in use beats already bound. */
  CHECK_ERRNO("bind bound socket to its own path", bind(l, (struct sockaddr *)&a, alen), EADDRINUSE);
  struct sockaddr_un a2;
  socklen_t a2len = path_addr(&a2, "srv2");
  CHECK_ERRNO("bind bound socket to a new path", bind(l, (struct sockaddr *)&a2, a2len), EINVAL);
  CHECK_ERRNO("which is not created", access(a2.sun_path, F_OK), ENOENT);
  CHECK_ERRNO("connect not listening", connect(other, (struct sockaddr *)&a, alen), ECONNREFUSED);
  CHECK("listen", listen(l, 4) == 0 && int_opt(l, SO_ACCEPTCONN) == 1);
  CHECK_ERRNO("connect a listening socket", connect(l, (struct sockaddr *)&a, alen), EINVAL);

  struct sockaddr_un missing;
  socklen_t ml = path_addr(&missing, "missing");
  CHECK_ERRNO("connect missing path", connect(other, (struct sockaddr *)&missing, ml), ENOENT);
  struct sockaddr_un file;
  socklen_t fl = path_addr(&file, "plain");
  int ffd = open(file.sun_path, O_CREAT | O_WRONLY, 0600);
  close(ffd);
  CHECK_ERRNO("connect regular file", connect(other, (struct sockaddr *)&file, fl), ECONNREFUSED);
  int dg = socket(AF_UNIX, SOCK_DGRAM, 0);
  CHECK_ERRNO("dgram connect to stream", connect(dg, (struct sockaddr *)&a, alen), EPROTOTYPE);
  close(dg);

  CHECK("connect", connect(other, (struct sockaddr *)&a, alen) == 0);
  gl = sizeof got;
  CHECK("getpeername is the server path", getpeername(other, (struct sockaddr *)&got, &gl) == 0 && gl == alen &&
        strcmp(got.sun_path, a.sun_path) == 0);
  CHECK_ERRNO("connect again", connect(other, (struct sockaddr *)&a, alen), EISCONN);
  struct ucred uc;
  socklen_t ul = sizeof uc;
  CHECK("SO_PEERCRED client", getsockopt(other, SOL_SOCKET, SO_PEERCRED, &uc, &ul) == 0 && uc.pid == getpid());
  CHECK("write before accept", write(other, "ping", 4) == 4);
  gl = sizeof got;
  memset(&got, 0x55, sizeof got);
  int s = accept4(l, (struct sockaddr *)&got, &gl, SOCK_CLOEXEC);
  CHECK("accept4", s >= 0 && fcntl(s, F_GETFD) == FD_CLOEXEC);
  CHECK("accepted peer unnamed", gl == sizeof(sa_family_t) && got.sun_family == AF_UNIX);
  gl = sizeof got;
  CHECK("accepted name is the listener's", getsockname(s, (struct sockaddr *)&got, &gl) == 0 && gl == alen);
  char buf[16];
  CHECK("server reads", read(s, buf, sizeof buf) == 4 && memcmp(buf, "ping", 4) == 0);
  CHECK("server writes", write(s, "pong", 4) == 4);
  CHECK("client reads", read(other, buf, sizeof buf) == 4 && memcmp(buf, "pong", 4) == 0);
  /* Raw: some libcs retry a failed accept4 as accept. */
  CHECK_ERRNO("accept4 bad flags", syscall(SYS_accept4, l, NULL, NULL, 0x4), EINVAL);
  close(s);
  close(other);

  /* A relative path resolves from the working directory. */
  char cwd[256];
  CHECK("getcwd", getcwd(cwd, sizeof cwd) != NULL);
  CHECK("chdir", chdir(g_dir) == 0);
  struct sockaddr_un rel = {.sun_family = AF_UNIX};
  strcpy(rel.sun_path, "rel");
  int rs = socket(AF_UNIX, SOCK_DGRAM, 0);
  socklen_t rl = offsetof(struct sockaddr_un, sun_path) + 4;
  CHECK("bind relative", bind(rs, (struct sockaddr *)&rel, rl) == 0);
  gl = sizeof got;
  CHECK("getsockname relative", getsockname(rs, (struct sockaddr *)&got, &gl) == 0 && gl == rl &&
        strcmp(got.sun_path, "rel") == 0);
  CHECK("chdir back", chdir(cwd) == 0);
  int cs = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un relabs;
  socklen_t ral = path_addr(&relabs, "rel");
  CHECK("sendto by absolute path", sendto(cs, "r", 1, 0, (struct sockaddr *)&relabs, ral) == 1);
  CHECK("recv relative-bound", recv(rs, buf, sizeof buf, 0) == 1);
  close(cs);
  close(rs);
  unlink(relabs.sun_path);

  /* Unlinked: still bound, but no longer reachable by name. */
  unlink(a.sun_path);
  other = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK_ERRNO("connect unlinked", connect(other, (struct sockaddr *)&a, alen), ENOENT);
  close(other);
  close(l);
  unlink(file.sun_path);
}

static void test_abstract_and_backlog(void) {
  struct sockaddr_un a, got;
  socklen_t alen = abstract_addr(&a, "bl");
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK("bind abstract", bind(l, (struct sockaddr *)&a, alen) == 0);
  socklen_t gl = sizeof got;
  CHECK("getsockname abstract", getsockname(l, (struct sockaddr *)&got, &gl) == 0 && gl == alen &&
        got.sun_path[0] == 0 && memcmp(got.sun_path, a.sun_path, alen - 2) == 0);
  int dup_ = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK_ERRNO("abstract in use", bind(dup_, (struct sockaddr *)&a, alen), EADDRINUSE);
  close(dup_);
  /* Each socket type has its own abstract names. */
  int other_type = socket(AF_UNIX, SOCK_DGRAM, 0);
  CHECK("same abstract name, other type", bind(other_type, (struct sockaddr *)&a, alen) == 0);
  struct sockaddr_un dg_only;
  socklen_t dglen = abstract_addr(&dg_only, "dgonly");
  int dgs = socket(AF_UNIX, SOCK_DGRAM, 0);
  bind(dgs, (struct sockaddr *)&dg_only, dglen);
  int st = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK_ERRNO("connect sees only its type", connect(st, (struct sockaddr *)&dg_only, dglen), ECONNREFUSED);
  close(st);
  close(dgs);
  close(other_type);
  CHECK("listen 0", listen(l, 0) == 0);
  int c1 = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int c2 = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  CHECK("first connect queued", connect(c1, (struct sockaddr *)&a, alen) == 0);
  CHECK_ERRNO("backlog full", connect(c2, (struct sockaddr *)&a, alen), EAGAIN);
  int s = accept(l, NULL, NULL);
  CHECK("accept", s >= 0);
  CHECK("room again", connect(c2, (struct sockaddr *)&a, alen) == 0);
  int s2 = accept(l, NULL, NULL);
  close(s2);
  fcntl(l, F_SETFL, O_NONBLOCK);
  CHECK_ERRNO("accept empty nonblocking", accept(l, NULL, NULL), EAGAIN);
  close(s);
  close(c1);
  close(c2);
  /* A listener closed with a connection it never accepted resets it. */
  int c3 = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  CHECK("connect then listener closes", connect(c3, (struct sockaddr *)&a, alen) == 0);
  close(l);
  char buf[4];
  CHECK_ERRNO("never accepted: reset", read(c3, buf, sizeof buf), ECONNRESET);
  CHECK("then EOF", read(c3, buf, sizeof buf) == 0);
  close(c3);
  int c4 = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK_ERRNO("name free after close", connect(c4, (struct sockaddr *)&a, alen), ECONNREFUSED);
  close(c4);

  int ab = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un fam = {.sun_family = AF_UNIX};
  CHECK("autobind", bind(ab, (struct sockaddr *)&fam, sizeof(sa_family_t)) == 0);
  gl = sizeof got;
  CHECK("autobind name", getsockname(ab, (struct sockaddr *)&got, &gl) == 0 && gl == 8 && got.sun_path[0] == 0);
  close(ab);
}

static void test_dgram(void) {
  struct sockaddr_un a, b, got;
  socklen_t alen = abstract_addr(&a, "dga");
  socklen_t blen = path_addr(&b, "dgb");
  int ra = socket(AF_UNIX, SOCK_DGRAM, 0), rb = socket(AF_UNIX, SOCK_DGRAM, 0);
  bind(ra, (struct sockaddr *)&a, alen);
  bind(rb, (struct sockaddr *)&b, blen);
  int u = socket(AF_UNIX, SOCK_DGRAM, 0);
  CHECK("sendto abstract", sendto(u, "to-a", 4, 0, (struct sockaddr *)&a, alen) == 4);
  CHECK("sendto path", sendto(u, "to-b", 4, 0, (struct sockaddr *)&b, blen) == 4);
  char buf[16];
  socklen_t gl = sizeof got;
  CHECK("recvfrom unnamed sender", recvfrom(ra, buf, sizeof buf, 0, (struct sockaddr *)&got, &gl) == 4 && gl == 0);
  CHECK("path receiver", recv(rb, buf, sizeof buf, 0) == 4 && memcmp(buf, "to-b", 4) == 0);
  CHECK("named sender", sendto(rb, "from-b", 6, 0, (struct sockaddr *)&a, alen) == 6);
  gl = sizeof got;
  CHECK("recvfrom named sender", recvfrom(ra, buf, sizeof buf, 0, (struct sockaddr *)&got, &gl) == 6 && gl == blen &&
        strcmp(got.sun_path, b.sun_path) == 0);
  gl = 4;
  CHECK("recvfrom short address buffer", sendto(rb, "x", 1, 0, (struct sockaddr *)&a, alen) == 1 &&
        recvfrom(ra, buf, sizeof buf, 0, (struct sockaddr *)&got, &gl) == 1 && gl == blen);

  CHECK("connect dgram", connect(ra, (struct sockaddr *)&b, blen) == 0);
  CHECK_ERRNO("others may not send to a connected socket", sendto(u, "x", 1, 0, (struct sockaddr *)&a, alen), EPERM);
  CHECK_ERRNO("nor connect to it", connect(u, (struct sockaddr *)&a, alen), EPERM);
  CHECK("its peer may", sendto(rb, "y", 1, 0, (struct sockaddr *)&a, alen) == 1 && recv(ra, buf, sizeof buf, 0) == 1);
  CHECK("send to default peer", send(ra, "dflt", 4, 0) == 4 && recv(rb, buf, sizeof buf, 0) == 4);
  gl = sizeof got;
  CHECK("getpeername dgram", getpeername(ra, (struct sockaddr *)&got, &gl) == 0 && gl == blen);
  struct sockaddr unspec = {.sa_family = AF_UNSPEC};
  CHECK("disconnect AF_UNSPEC", connect(ra, &unspec, sizeof unspec) == 0);
  gl = sizeof got;
  CHECK_ERRNO("getpeername after disconnect", getpeername(ra, (struct sockaddr *)&got, &gl), ENOTCONN);
  CHECK("others may send again", sendto(u, "z", 1, 0, (struct sockaddr *)&a, alen) == 1 && recv(ra, buf, sizeof buf, 0) == 1);

  CHECK("connect u to b", connect(u, (struct sockaddr *)&b, blen) == 0);
  close(rb);
  unlink(b.sun_path);
  CHECK_ERRNO("peer closed", send(u, "x", 1, 0), ECONNREFUSED);
  CHECK_ERRNO("then not connected", send(u, "x", 1, 0), ENOTCONN);
  CHECK_ERRNO("sendto missing path", sendto(u, "x", 1, 0, (struct sockaddr *)&b, blen), ENOENT);
  int big = 300000;
  char *p = calloc(1, big);
  CHECK_ERRNO("datagram too big", sendto(u, p, big, 0, (struct sockaddr *)&a, alen), EMSGSIZE);
  free(p);
  close(u);
  close(ra);

  /* A receiver that is not connected back holds 11 datagrams. */
  struct sockaddr_un q;
  socklen_t qlen = abstract_addr(&q, "q");
  int r = socket(AF_UNIX, SOCK_DGRAM, 0);
  bind(r, (struct sockaddr *)&q, qlen);
  int snd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  connect(snd, (struct sockaddr *)&q, qlen);
  int n = 0;
  while (send(snd, "d", 1, 0) == 1 && n < 100) n++;
  CHECK("queue limit", n == 11 && errno == EAGAIN);
  CHECK("drain one", recv(r, buf, sizeof buf, 0) == 1);
  CHECK("room for one more", send(snd, "d", 1, 0) == 1);
  close(snd);
  close(r);
}

static void test_shutdown_and_close(void) {
  int sv[2];
  char buf[16];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  CHECK("write", write(sv[0], "last", 4) == 4);
  CHECK("shutdown SHUT_WR", shutdown(sv[0], SHUT_WR) == 0);
  g_sigpipes = 0;
  CHECK_ERRNO("send after SHUT_WR", send(sv[0], "x", 1, 0), EPIPE);
  CHECK("SIGPIPE raised by send", g_sigpipes == 1);
  CHECK_ERRNO("MSG_NOSIGNAL", send(sv[0], "x", 1, MSG_NOSIGNAL), EPIPE);
  CHECK("no SIGPIPE with MSG_NOSIGNAL", g_sigpipes == 1);
  CHECK_ERRNO("write after SHUT_WR", write(sv[0], "x", 1), EPIPE);
  CHECK("SIGPIPE raised by write", g_sigpipes == 2);
  CHECK("peer reads data", read(sv[1], buf, sizeof buf) == 4);
  CHECK("then EOF", read(sv[1], buf, sizeof buf) == 0);
  CHECK("other direction open", write(sv[1], "back", 4) == 4 && read(sv[0], buf, sizeof buf) == 4);
  CHECK("peer SHUT_RD", shutdown(sv[0], SHUT_RD) == 0);
  CHECK_ERRNO("writer sees EPIPE", send(sv[1], "x", 1, MSG_NOSIGNAL), EPIPE);
  close(sv[0]);
  close(sv[1]);

  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  CHECK("write unread", write(sv[0], "unread", 6) == 6);
  close(sv[1]);
  CHECK_ERRNO("write to closed peer", send(sv[0], "x", 1, MSG_NOSIGNAL), EPIPE);
  CHECK("SO_ERROR after reset", int_opt(sv[0], SO_ERROR) == ECONNRESET);
  CHECK("SO_ERROR cleared", int_opt(sv[0], SO_ERROR) == 0);
  CHECK("EOF after reset", read(sv[0], buf, sizeof buf) == 0);
  close(sv[0]);

  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  close(sv[1]);
  CHECK("peer closed cleanly: EOF", read(sv[0], buf, sizeof buf) == 0);
  close(sv[0]);

  socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
  send(sv[1], "queued", 6, 0);
  close(sv[1]);
  g_sigpipes = 0;
  CHECK_ERRNO("seqpacket peer closed", send(sv[0], "x", 1, 0), EPIPE);
  CHECK("seqpacket send raises no SIGPIPE", g_sigpipes == 0);
  CHECK("seqpacket queued data readable", recv(sv[0], buf, sizeof buf, 0) == 6);
  CHECK("seqpacket EOF", recv(sv[0], buf, sizeof buf, 0) == 0);
  CHECK("seqpacket EOF nonblocking", recv(sv[0], buf, sizeof buf, MSG_DONTWAIT) == 0);
  close(sv[0]);

  int d = socket(AF_UNIX, SOCK_DGRAM, 0);
  CHECK("dgram shutdown", shutdown(d, SHUT_RDWR) == 0);
  CHECK("dgram after SHUT_RD: EOF", recv(d, buf, sizeof buf, 0) == 0);
  CHECK_ERRNO("dgram after SHUT_RD nonblocking", recv(d, buf, sizeof buf, MSG_DONTWAIT), EAGAIN);
  close(d);
}

/* --- Blocking between threads. ---------------------------------------- */

struct conn_args {
  struct sockaddr_un addr;
  socklen_t len;
  int fd;
  int result;
};

static void *connector(void *p) {
  struct conn_args *c = p;
  c->result = connect(c->fd, (struct sockaddr *)&c->addr, c->len);
  if (c->result == 0) c->result = (int)write(c->fd, "from-thread", 11);
  return NULL;
}

static void *slow_writer(void *p) {
  int fd = *(int *)p;
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  write(fd, "part1-", 6);
  nanosleep(&ts, NULL);
  write(fd, "part2", 5);
  return NULL;
}

#define BULK (1 << 20)

static void *bulk_writer(void *p) {
  int fd = *(int *)p;
  unsigned char *buf = malloc(BULK);
  for (int i = 0; i < BULK; i++) buf[i] = (unsigned char)(i * 7);
  size_t done = 0;
  while (done < BULK) {
    ssize_t n = write(fd, buf + done, BULK - done);
    if (n <= 0) break;
    done += n;
  }
  free(buf);
  close(fd);
  return (void *)(intptr_t)(done == BULK);
}

static void test_blocking(void) {
  /* Blocking accept, then blocking connect against a full backlog. */
  struct conn_args c;
  c.len = abstract_addr(&c.addr, "blk");
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  bind(l, (struct sockaddr *)&c.addr, c.len);
  listen(l, 0);
  int filler = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK("fill the backlog", connect(filler, (struct sockaddr *)&c.addr, c.len) == 0);
  c.fd = socket(AF_UNIX, SOCK_STREAM, 0);
  pthread_t th;
  pthread_create(&th, NULL, connector, &c);
  int s1 = accept(l, NULL, NULL);
  int s2 = accept(l, NULL, NULL); /* blocks until the thread's connect */
  pthread_join(th, NULL);
  CHECK("blocked connect completed", c.result == 11);
  char buf[64];
  CHECK("data from the blocked connector", read(s2, buf, sizeof buf) == 11 && memcmp(buf, "from-thread", 11) == 0);
  close(s1);
  close(s2);
  close(filler);
  close(c.fd);
  close(l);

  /* MSG_WAITALL gathers two delayed writes. */
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  pthread_create(&th, NULL, slow_writer, &sv[0]);
  CHECK("MSG_WAITALL", recv(sv[1], buf, 11, MSG_WAITALL) == 11 && memcmp(buf, "part1-part2", 11) == 0);
  pthread_join(th, NULL);
  close(sv[0]);
  close(sv[1]);

  /* A writer blocked on a small send buffer, drained by the reader. */
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  int small = 8192;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  pthread_create(&th, NULL, bulk_writer, &sv[0]);
  unsigned char *in = malloc(BULK);
  size_t got = 0;
  for (;;) {
    ssize_t n = read(sv[1], in + got, BULK - got);
    if (n <= 0) break;
    got += n;
    if (got == BULK) {
      n = read(sv[1], buf, 1); /* EOF once the writer closed */
      if (n == 0) break;
    }
  }
  void *ok;
  pthread_join(th, &ok);
  int same = got == BULK;
  for (int i = 0; same && i < BULK; i++) same = in[i] == (unsigned char)(i * 7);
  CHECK("1 MiB through an 8 KiB send buffer", same && ok != NULL);
  free(in);
  close(sv[1]);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, on_sigpipe);
  strcpy(g_dir, "/tmp/unix_sockets.XXXXXX");
  if (mkdtemp(g_dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  srand((unsigned)(ts.tv_nsec ^ getpid()));
  snprintf(g_abstract, sizeof g_abstract, "sbx-test-%08x", (unsigned)rand());

  test_pairs();
  test_socket_errors();
  test_options();
  test_paths();
  test_abstract_and_backlog();
  test_dgram();
  test_shutdown_and_close();
  test_blocking();

  CHECK("temp dir removed", rmdir(g_dir) == 0);
  return finish();
}
