/* AF_UNIX control messages: SCM_RIGHTS (files and sockets passed between
 * threads, several per message, short control buffers and MSG_CTRUNC,
 * MSG_CMSG_CLOEXEC, MSG_PEEK, stream reads stopping after the bytes that
 * carried files) and SCM_CREDENTIALS (SO_PASSCRED, explicit credentials,
 * stream writers not merged). Files live in a fresh mkdtemp directory. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common.h"

static char g_dir[64];
static char g_file[128];

/* Sends `data` with the given fds (and explicit credentials if `uc`). */
static ssize_t send_fds(int sock, const char *data, size_t len, const int *fds,
                        int nfds, const struct ucred *uc) {
  char cbuf[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(struct ucred))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {(void *)data, len};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  size_t used = 0;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (nfds > 0) {
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    used += CMSG_SPACE(sizeof(int) * nfds);
    c = CMSG_NXTHDR(&m, c);
  }
  if (uc != NULL) {
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_CREDENTIALS;
    c->cmsg_len = CMSG_LEN(sizeof *uc);
    memcpy(CMSG_DATA(c), uc, sizeof *uc);
    used += CMSG_SPACE(sizeof *uc);
  }
  m.msg_controllen = used;
  if (used == 0) m.msg_control = NULL;
  return sendmsg(sock, &m, 0);
}

struct received {
  ssize_t n;
  int flags;
  int nfds;
  int fds[16];
  int have_creds;
  struct ucred creds;
  int creds_first;
  size_t controllen;
};

static void recv_fds(int sock, char *buf, size_t len, size_t controllen,
                     int flags, struct received *r) {
  char cbuf[512];
  struct iovec iov = {buf, len};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = controllen ? cbuf : NULL;
  m.msg_controllen = controllen;
  memset(r, 0, sizeof *r);
  r->n = recvmsg(sock, &m, flags);
  r->flags = m.msg_flags;
  r->controllen = m.msg_controllen;
  if (r->n < 0) return;
  int index = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(r->fds + r->nfds, CMSG_DATA(c), sizeof(int) * n);
      r->nfds += n;
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      memcpy(&r->creds, CMSG_DATA(c), sizeof r->creds);
      r->have_creds = 1;
      r->creds_first = index == 0;
    }
    index++;
  }
}

static int file_content_ok(int fd) {
  char buf[32] = {0};
  return pread(fd, buf, sizeof buf, 0) == 11 && memcmp(buf, "passed file", 11) == 0;
}

static void test_rights(void) {
  int sv[2];
  char buf[64];
  struct received r;
  int file = open(g_file, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK("create file", file >= 0 && write(file, "passed file", 11) == 11);

  CHECK("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK("send one fd", send_fds(sv[0], "F", 1, &file, 1, NULL) == 1);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("receive one fd", r.n == 1 && r.nfds == 1 && r.flags == 0 &&
        r.controllen == CMSG_SPACE(sizeof(int)));
  CHECK("received fd is a new descriptor", r.nfds == 1 && r.fds[0] != file);
  CHECK("received fd reads the file", r.nfds == 1 && file_content_ok(r.fds[0]));
  CHECK("shares the file offset", r.nfds == 1 && lseek(r.fds[0], 3, SEEK_SET) == 3 &&
        lseek(file, 0, SEEK_CUR) == 3);
  CHECK("not close-on-exec", r.nfds == 1 && fcntl(r.fds[0], F_GETFD) == 0);
  if (r.nfds == 1) close(r.fds[0]);

  /* Several in one message; the read stops after the bytes they came with. */
  int three[3] = {file, sv[0], file};
  CHECK("send three fds", send_fds(sv[0], "abc", 3, three, 3, NULL) == 3);
  CHECK("more data behind", write(sv[0], "def", 3) == 3);
  recv_fds(sv[1], buf, sizeof buf, 512, MSG_CMSG_CLOEXEC, &r);
  CHECK("read stops after the fd-carrying bytes", r.n == 3 && memcmp(buf, "abc", 3) == 0);
  CHECK("three fds", r.nfds == 3);
  CHECK("MSG_CMSG_CLOEXEC", r.nfds == 3 && fcntl(r.fds[0], F_GETFD) == FD_CLOEXEC &&
        fcntl(r.fds[2], F_GETFD) == FD_CLOEXEC);
  struct stat st;
  CHECK("a socket passed", r.nfds == 3 && fstat(r.fds[1], &st) == 0 && S_ISSOCK(st.st_mode));
  /* The passed socket is sv[0] itself: write through it, read on sv[1]. */
  CHECK("use the passed socket", r.nfds == 3 && write(r.fds[1], "ghi", 3) == 3);
  for (int i = 0; i < r.nfds; i++) close(r.fds[i]);
  CHECK("rest of the stream", read(sv[1], buf, sizeof buf) == 6 && memcmp(buf, "defghi", 6) == 0);

  /* A control buffer with room for one fd of three: MSG_CTRUNC (the
   * others are closed). CMSG_SPACE would be padded to room for two. */
  CHECK("send three again", send_fds(sv[0], "x", 1, three, 3, NULL) == 1);
  recv_fds(sv[1], buf, sizeof buf, CMSG_LEN(sizeof(int)), 0, &r);
  CHECK("MSG_CTRUNC", r.n == 1 && (r.flags & MSG_CTRUNC) && r.nfds == 1);
  if (r.nfds == 1) close(r.fds[0]);
  /* No room at all. */
  CHECK("send one more", send_fds(sv[0], "y", 1, &file, 1, NULL) == 1);
  recv_fds(sv[1], buf, sizeof buf, sizeof(struct cmsghdr) - 1, 0, &r);
  CHECK("no room: MSG_CTRUNC, no fds", r.n == 1 && (r.flags & MSG_CTRUNC) && r.nfds == 0 && r.controllen == 0);
  CHECK("send again", send_fds(sv[0], "z", 1, &file, 1, NULL) == 1);
  CHECK("recv without a control buffer drops the fd", recv(sv[1], buf, sizeof buf, 0) == 1);

  int bad = 1000;
  CHECK_ERRNO("bad fd", send_fds(sv[0], "b", 1, &bad, 1, NULL), EBADF);
  CHECK("empty stream send carries nothing", send_fds(sv[0], "", 0, &file, 1, NULL) == 0);
  CHECK_ERRNO("nothing queued", recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), EAGAIN);
  close(sv[0]);
  close(sv[1]);

  /* Datagrams: MSG_PEEK installs the fds too. */
  CHECK("dgram pair", socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0);
  CHECK("dgram with fd", send_fds(sv[0], "dg", 2, &file, 1, NULL) == 2);
  struct received peeked;
  recv_fds(sv[1], buf, sizeof buf, 512, MSG_PEEK, &peeked);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("peek and receive both install", peeked.n == 2 && r.n == 2 && peeked.nfds == 1 && r.nfds == 1 &&
        peeked.fds[0] != r.fds[0] && file_content_ok(peeked.fds[0]) && file_content_ok(r.fds[0]));
  if (peeked.nfds) close(peeked.fds[0]);
  if (r.nfds) close(r.fds[0]);
  CHECK("zero-length datagram with fd", send_fds(sv[0], "", 0, &file, 1, NULL) == 0);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("received", r.n == 0 && r.nfds == 1);
  if (r.nfds) close(r.fds[0]);
  /* Files queued on a socket that is closed are closed with it. */
  CHECK("queue an fd", send_fds(sv[0], "q", 1, &file, 1, NULL) == 1);
  close(sv[1]);
  close(sv[0]);
  close(file);
}

static void *cred_sender(void *p) {
  int fd = *(int *)p;
  write(fd, "from-thread", 11);
  return NULL;
}

static void test_credentials(void) {
  int sv[2];
  char buf[64];
  struct received r;
  CHECK("seqpacket pair", socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
  CHECK("no creds without SO_PASSCRED", send(sv[0], "a", 1, 0) == 1);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("none", r.n == 1 && !r.have_creds);
  int on = 1;
  CHECK("SO_PASSCRED", setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0);
  CHECK("plain send", send(sv[0], "b", 1, 0) == 1);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("creds attached", r.n == 1 && r.have_creds && r.creds.pid == getpid() &&
        r.creds.uid == getuid() && r.creds.gid == getgid());
  CHECK("controllen", r.controllen == CMSG_SPACE(sizeof(struct ucred)));
  struct ucred mine = {getpid(), getuid(), getgid()};
  int file = open(g_file, O_RDONLY);
  CHECK("explicit creds with an fd", send_fds(sv[0], "c", 1, &file, 1, &mine) == 1);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("creds come before rights", r.have_creds && r.creds_first && r.nfds == 1 && r.creds.pid == getpid());
  if (r.nfds) close(r.fds[0]);
  close(file);
  /* A thread of this process sends with the process's pid. */
  pthread_t th;
  pthread_create(&th, NULL, cred_sender, &sv[0]);
  pthread_join(th, NULL);
  recv_fds(sv[1], buf, sizeof buf, 512, 0, &r);
  CHECK("thread's creds are the process's", r.n == 11 && r.have_creds && r.creds.pid == getpid());
  /* A short control buffer truncates the credentials. */
  CHECK("send", send(sv[0], "d", 1, 0) == 1);
  recv_fds(sv[1], buf, sizeof buf, sizeof(struct cmsghdr) + 4, 0, &r);
  CHECK("truncated creds", r.n == 1 && (r.flags & MSG_CTRUNC));
  struct ucred bad = {999999, getuid(), getgid()};
  CHECK_ERRNO("creds of a missing pid", send_fds(sv[0], "e", 1, NULL, 0, &bad), ESRCH);
  close(sv[0]);
  close(sv[1]);

  /* SO_PASSCRED on a listener is inherited by accepted sockets; the
   * connecting side is autobound. */
  char name[128];
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(name, sizeof name, "%s/srv", g_dir);
  strcpy(a.sun_path, name);
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK("bind", bind(l, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK("passcred on listener", setsockopt(l, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0);
  listen(l, 1);
  int c = socket(AF_UNIX, SOCK_STREAM, 0);
  setsockopt(c, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
  CHECK("connect", connect(c, (struct sockaddr *)&a, sizeof a) == 0);
  struct sockaddr_un got;
  socklen_t gl = sizeof got;
  CHECK("connector with SO_PASSCRED is autobound", getsockname(c, (struct sockaddr *)&got, &gl) == 0 && gl == 8 &&
        got.sun_path[0] == 0);
  int s = accept(l, NULL, NULL);
  int v = 0;
  socklen_t vl = sizeof v;
  CHECK("accepted inherits SO_PASSCRED", getsockopt(s, SOL_SOCKET, SO_PASSCRED, &v, &vl) == 0 && v == 1);
  struct ucred pc;
  socklen_t pl = sizeof pc;
  CHECK("SO_PEERCRED of accepted", getsockopt(s, SOL_SOCKET, SO_PEERCRED, &pc, &pl) == 0 && pc.pid == getpid());
  CHECK("stream write", write(c, "hello", 5) == 5);
  recv_fds(s, buf, sizeof buf, 512, 0, &r);
  CHECK("stream creds", r.n == 5 && r.have_creds && r.creds.pid == getpid());
  close(s);
  close(c);
  close(l);
  unlink(name);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  strcpy(g_dir, "/tmp/unix_sockets_scm.XXXXXX");
  if (mkdtemp(g_dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(g_file, sizeof g_file, "%s/file", g_dir);
  test_rights();
  test_credentials();
  unlink(g_file);
  CHECK("temp dir removed", rmdir(g_dir) == 0);
  return finish();
}
