/* epoll, poll and select on AF_UNIX sockets: socketpairs of each type,
 * a listening socket with a pending connection, shutdown and peer close,
 * edge-triggered and one-shot interests. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <stddef.h>
#include <unistd.h>

#include "common.h"

/* The events of one epoll_wait with timeout 0, or -1 if none/error. */
static int wait_events(int ep) {
  struct epoll_event ev;
  int n = epoll_wait(ep, &ev, 1, 0);
  return n == 1 ? (int)ev.events : (n == 0 ? 0 : -1);
}

static void pair_basics(int type, const char* tn) {
  char name[128];
  int sv[2];
  if (socketpair(AF_UNIX, type, 0, sv) != 0) {
    snprintf(name, sizeof(name), "%s socketpair", tn);
    CHECK(name, 0);
    return;
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = 7};
  snprintf(name, sizeof(name), "%s epoll_ctl add", tn);
  CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev) == 0);
  snprintf(name, sizeof(name), "%s not readable when empty", tn);
  CHECK(name, wait_events(ep) == 0);
  write(sv[1], "hello", 5);
  struct epoll_event out;
  int n = epoll_wait(ep, &out, 1, 1000);
  snprintf(name, sizeof(name), "%s readable after write", tn);
  CHECK(name, n == 1 && out.events == EPOLLIN && out.data.u32 == 7);
  snprintf(name, sizeof(name), "%s level-triggered stays ready", tn);
  CHECK(name, wait_events(ep) == EPOLLIN);
  char buf[16];
  read(sv[0], buf, sizeof(buf));
  snprintf(name, sizeof(name), "%s unready after read", tn);
  CHECK(name, wait_events(ep) == 0);

  /* EPOLLOUT on the other end. */
  ev.events = EPOLLOUT;
  epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &ev);
  snprintf(name, sizeof(name), "%s writable", tn);
  CHECK(name, wait_events(ep) == EPOLLOUT);
  epoll_ctl(ep, EPOLL_CTL_DEL, sv[1], NULL);

  /* poll and select agree. */
  struct pollfd p = {.fd = sv[0], .events = POLLIN | POLLOUT};
  snprintf(name, sizeof(name), "%s poll writable only", tn);
  CHECK(name, poll(&p, 1, 0) == 1 && p.revents == POLLOUT);
  write(sv[1], "x", 1);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(sv[0], &rd);
  struct timeval tv = {0, 0};
  snprintf(name, sizeof(name), "%s select readable", tn);
  CHECK(name, select(sv[0] + 1, &rd, NULL, NULL, &tv) == 1 &&
                  FD_ISSET(sv[0], &rd));
  read(sv[0], buf, sizeof(buf));

  if (type != SOCK_DGRAM) {
    /* The peer shuts down its writing side: EPOLLIN|EPOLLRDHUP. */
    shutdown(sv[1], SHUT_WR);
    n = epoll_wait(ep, &out, 1, 1000);
    snprintf(name, sizeof(name), "%s peer SHUT_WR: EPOLLIN|EPOLLRDHUP", tn);
    CHECK(name, n == 1 && out.events == (EPOLLIN | EPOLLRDHUP));
    /* The peer closes: EPOLLHUP too. */
    close(sv[1]);
    snprintf(name, sizeof(name), "%s peer closed: IN|RDHUP|HUP", tn);
    CHECK(name, wait_events(ep) == (EPOLLIN | EPOLLRDHUP | EPOLLHUP));
    p.fd = sv[0];
    p.events = POLLIN | POLLOUT | POLLRDHUP;
    snprintf(name, sizeof(name), "%s poll after peer close", tn);
    CHECK(name, poll(&p, 1, 0) == 1 &&
                    p.revents == (POLLIN | POLLOUT | POLLRDHUP | POLLHUP));
  } else {
    close(sv[1]);
  }
  close(sv[0]);
  close(ep);
}

static void edge_triggered(void) {
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u32 = 1};
  epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
  write(sv[1], "ab", 2);
  CHECK("et first write reported", wait_events(ep) == EPOLLIN);
  CHECK("et not reported again without new data", wait_events(ep) == 0);
  write(sv[1], "c", 1);
  CHECK("et new data reported although still readable",
        wait_events(ep) == EPOLLIN);
  char buf[8];
  CHECK("et read all", read(sv[0], buf, sizeof(buf)) == 3);
  CHECK("et nothing after draining", wait_events(ep) == 0);

  /* One-shot: reported once, then disabled until EPOLL_CTL_MOD. */
  ev.events = EPOLLIN | EPOLLONESHOT;
  epoll_ctl(ep, EPOLL_CTL_MOD, sv[0], &ev);
  write(sv[1], "d", 1);
  CHECK("oneshot reported", wait_events(ep) == EPOLLIN);
  write(sv[1], "e", 1);
  CHECK("oneshot disabled", wait_events(ep) == 0);
  epoll_ctl(ep, EPOLL_CTL_MOD, sv[0], &ev);
  CHECK("oneshot re-armed by MOD", wait_events(ep) == EPOLLIN);
  close(sv[0]);
  close(sv[1]);
  close(ep);
}

static void listening(void) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  /* An abstract name: no file to clean up. */
  const char nm[] = "\0sbx-unix-epoll-test";
  memcpy(a.sun_path, nm, sizeof(nm) - 1);
  socklen_t len = offsetof(struct sockaddr_un, sun_path) + sizeof(nm) - 1;
  int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  CHECK("listen bind", bind(l, (struct sockaddr*)&a, len) == 0);
  CHECK("listen", listen(l, 4) == 0);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = 2};
  CHECK("listener epoll_ctl add", epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == 0);
  CHECK("listener idle: no events", wait_events(ep) == 0);
  int c = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK("connect", connect(c, (struct sockaddr*)&a, len) == 0);
  struct epoll_event out;
  CHECK("listener readable with pending connection",
        epoll_wait(ep, &out, 1, 1000) == 1 && out.events == EPOLLIN);
  int s = accept(l, NULL, NULL);
  CHECK("accept", s >= 0);
  CHECK("listener unready after accept", wait_events(ep) == 0);

  /* The accepted socket sees its client's data and close. */
  struct epoll_event ev2 = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = 3};
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev2);
  write(c, "z", 1);
  CHECK("accepted socket readable",
        epoll_wait(ep, &out, 1, 1000) == 1 && out.data.u32 == 3 &&
            out.events == EPOLLIN);
  close(c);
  CHECK("accepted socket: client closed",
        epoll_wait(ep, &out, 1, 1000) == 1 &&
            out.events == (EPOLLIN | EPOLLRDHUP | EPOLLHUP));

  /* A fresh unconnected stream socket has hung up and is writable. */
  int u = socket(AF_UNIX, SOCK_STREAM, 0);
  struct pollfd p = {.fd = u, .events = POLLIN | POLLOUT};
  CHECK("unconnected stream socket: POLLOUT|POLLHUP",
        poll(&p, 1, 0) == 1 && p.revents == (POLLOUT | POLLHUP));

  /* Closing a watched socket removes it from the interest list. */
  epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL);
  close(s);
  close(u);
  close(l);
  close(ep);
}

/* A datagram sender to a full receiver that is not connected back: not
 * writable until the receiver reads (the peer_wait_ path). */
static void dgram_full_receiver(void) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  const char nm[] = "\0sbx-unix-epoll-dgram";
  memcpy(a.sun_path, nm, sizeof(nm) - 1);
  socklen_t len = offsetof(struct sockaddr_un, sun_path) + sizeof(nm) - 1;
  int r = socket(AF_UNIX, SOCK_DGRAM, 0);
  bind(r, (struct sockaddr*)&a, len);
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  CHECK("dgram connect", connect(s, (struct sockaddr*)&a, len) == 0);
  int sent = 0;
  while (send(s, "m", 1, 0) == 1 && sent < 1000) sent++;
  CHECK("dgram receiver queue fills", sent > 0 && sent < 1000 &&
                                          errno == EAGAIN);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLOUT | EPOLLET, .data.u32 = 9};
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
  CHECK("dgram sender not writable while the receiver is full",
        wait_events(ep) == 0);
  char buf[4];
  recv(r, buf, sizeof(buf), 0);
  struct epoll_event out;
  CHECK("dgram sender writable after the receiver reads",
        epoll_wait(ep, &out, 1, 1000) == 1 && out.events == EPOLLOUT);
  close(ep);
  close(s);
  close(r);
}

/* A blocked epoll_wait is woken by a write from another process. */
static void wakeup(void) {
  int sv[2];
  socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN};
  epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
  pid_t pid = fork();
  if (pid == 0) {
    usleep(50000);
    write(sv[1], "wake", 4);
    _exit(0);
  }
  struct epoll_event out;
  CHECK("blocked epoll_wait woken by writer",
        epoll_wait(ep, &out, 1, 5000) == 1 && out.events == EPOLLIN);
  char buf[8];
  CHECK("seqpacket message", read(sv[0], buf, sizeof(buf)) == 4);
  waitpid(pid, NULL, 0);
  close(sv[0]);
  close(sv[1]);
  close(ep);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  pair_basics(SOCK_STREAM, "stream");
  pair_basics(SOCK_DGRAM, "dgram");
  pair_basics(SOCK_SEQPACKET, "seqpacket");
  edge_triggered();
  listening();
  dgram_full_receiver();
  wakeup();
  return finish();
}
