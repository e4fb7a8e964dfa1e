/* TCP over loopback (127.0.0.1 and ::1): echo with threads, many
 * simultaneous connections, a large transfer with partial writes,
 * non-blocking connect with epoll and SO_ERROR, refused connections,
 * shutdown(SHUT_WR), MSG_PEEK/MSG_DONTWAIT/MSG_WAITALL, EPIPE and SIGPIPE,
 * FIONREAD, SO_RCVTIMEO and a signal interrupting a blocking recv.
 *
 * Ports are chosen by bind to port 0; nothing host-specific is printed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/select.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

typedef struct {
  struct sockaddr_storage ss;
  socklen_t len;
} addr_t;

/* A listener on the loopback of `family`, port chosen by the kernel. */
static int listener(int family, addr_t* a) {
  int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  memset(a, 0, sizeof(*a));
  if (family == AF_INET) {
    struct sockaddr_in* in = (struct sockaddr_in*)&a->ss;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->len = sizeof(*in);
  } else {
    struct sockaddr_in6* in6 = (struct sockaddr_in6*)&a->ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    a->len = sizeof(*in6);
  }
  if (bind(s, (struct sockaddr*)&a->ss, a->len) != 0) return -1;
  if (listen(s, 256) != 0) return -1;
  a->len = sizeof(a->ss);
  if (getsockname(s, (struct sockaddr*)&a->ss, &a->len) != 0) return -1;
  return s;
}

static int connect_to(const addr_t* a, int flags) {
  int c = socket(a->ss.ss_family, SOCK_STREAM | flags, 0);
  if (c < 0) return -1;
  if (connect(c, (const struct sockaddr*)&a->ss, a->len) != 0 &&
      errno != EINPROGRESS) {
    close(c);
    return -1;
  }
  return c;
}

static int write_all(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return -1;
    c += w;
    n -= w;
  }
  return 0;
}

static ssize_t read_all(int fd, void* p, size_t n) {
  char* c = p;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, c + got, n - got);
    if (r < 0) return -1;
    if (r == 0) break;
    got += r;
  }
  return got;
}

/* Echo server thread: accepts `count` connections, echoes each until EOF. */
struct echo_arg {
  int lfd;
  int count;
};

static void* echo_server(void* p) {
  struct echo_arg* a = p;
  for (int i = 0; i < a->count; i++) {
    int c = accept(a->lfd, NULL, NULL);
    if (c < 0) return (void*)1;
    char buf[4096];
    for (;;) {
      ssize_t r = read(c, buf, sizeof(buf));
      if (r <= 0) break;
      if (write_all(c, buf, r) != 0) break;
    }
    close(c);
  }
  return NULL;
}

static void echo_test(int family, const char* name) {
  addr_t a;
  int l = listener(family, &a);
  char label[64];
  snprintf(label, sizeof(label), "%s listen", name);
  CHECK(label, l >= 0);
  if (l < 0) return;
  struct echo_arg ea = {l, 2};
  pthread_t th;
  pthread_create(&th, NULL, echo_server, &ea);
  int ok = 1;
  for (int round = 0; round < 2; round++) {
    int c = connect_to(&a, 0);
    if (c < 0) { ok = 0; break; }
    /* getsockname/getpeername relations */
    addr_t me, peer;
    me.len = peer.len = sizeof(me.ss);
    getsockname(c, (struct sockaddr*)&me.ss, &me.len);
    getpeername(c, (struct sockaddr*)&peer.ss, &peer.len);
    if (peer.len != a.len || memcmp(&peer.ss, &a.ss, a.len) != 0) ok = 0;
    if (me.ss.ss_family != family) ok = 0;
    for (int i = 0; i < 50; i++) {
      char msg[64], back[64];
      int n = snprintf(msg, sizeof(msg), "message %d of round %d", i, round);
      if (write_all(c, msg, n) != 0 || read_all(c, back, n) != n ||
          memcmp(msg, back, n) != 0) {
        ok = 0;
        break;
      }
    }
    close(c);
  }
  void* rv;
  pthread_join(th, &rv);
  snprintf(label, sizeof(label), "%s echo with a server thread", name);
  CHECK(label, ok && rv == NULL);
  close(l);
}

/* 200 connections open at once, each says its number, the server answers
 * with it doubled. */
#define NCONN 200
static void many_connections(void) {
  addr_t a;
  int l = listener(AF_INET, &a);
  int cs[NCONN], ss[NCONN];
  int ok = l >= 0;
  for (int i = 0; i < NCONN && ok; i++) {
    cs[i] = connect_to(&a, SOCK_CLOEXEC);
    if (cs[i] < 0) ok = 0;
  }
  for (int i = 0; i < NCONN && ok; i++) {
    ss[i] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (ss[i] < 0) ok = 0;
  }
  CHECK("200 connections accepted", ok);
  if (!ok) return;
  for (int i = 0; i < NCONN; i++) {
    uint32_t v = i;
    if (write(cs[i], &v, 4) != 4) ok = 0;
  }
  /* The server side reads every connection (order of accept is the order
   * of connect on loopback, but do not rely on it: answer what was sent). */
  for (int i = 0; i < NCONN; i++) {
    uint32_t v;
    if (read_all(ss[i], &v, 4) != 4) { ok = 0; continue; }
    v *= 2;
    if (write(ss[i], &v, 4) != 4) ok = 0;
  }
  int sum_ok = 1;
  for (int i = 0; i < NCONN; i++) {
    uint32_t v;
    if (read_all(cs[i], &v, 4) != 4 || v != (uint32_t)(2 * i)) sum_ok = 0;
    close(cs[i]);
    close(ss[i]);
  }
  CHECK("200 connections answered", ok && sum_ok);
  close(l);
}

/* 8 MiB from a non-blocking writer (partial writes, EAGAIN, poll) to a
 * reader thread that checksums it. */
#define BIG (8u << 20)
struct big_arg {
  int fd;
  uint64_t sum;
  size_t got;
};
static void* big_reader(void* p) {
  struct big_arg* b = p;
  usleep(200000);  /* the writer fills the small buffers first */
  static unsigned char buf[65536];
  for (;;) {
    ssize_t r = read(b->fd, buf, sizeof(buf));
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; i++) b->sum = b->sum * 31 + buf[i];
    b->got += r;
  }
  return NULL;
}

static void large_transfer(void) {
  addr_t a;
  int l = listener(AF_INET6, &a);
  /* Small buffers on both sides (the accepted socket inherits the
   * listener's), so that the writer meets a full socket. */
  int small = 65536;
  setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  int c = socket(AF_INET6, SOCK_STREAM, 0);
  setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  if (connect(c, (struct sockaddr*)&a.ss, a.len) != 0) c = -1;
  int s = accept(l, NULL, NULL);
  CHECK("large: connected", l >= 0 && c >= 0 && s >= 0);
  if (c < 0 || s < 0) return;
  unsigned char* data = malloc(BIG);
  uint64_t want = 0;
  for (size_t i = 0; i < BIG; i++) {
    data[i] = (unsigned char)(i * 7 + (i >> 13));
    want = want * 31 + data[i];
  }
  struct big_arg b = {s, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, big_reader, &b);
  fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
  size_t off = 0;
  int partial = 0, eagain = 0, err = 0;
  while (off < BIG) {
    size_t n = BIG - off < (1u << 20) ? BIG - off : (1u << 20);
    ssize_t w = write(c, data + off, n);
    if (w < 0) {
      if (errno != EAGAIN) { err = 1; break; }
      eagain = 1;
      struct pollfd p = {c, POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if ((size_t)w < n) partial = 1;
    off += w;
  }
  shutdown(c, SHUT_WR);
  pthread_join(th, NULL);
  CHECK("large: 8 MiB arrived intact", !err && b.got == BIG && b.sum == want);
  CHECK("large: non-blocking writes were partial or EAGAIN", partial || eagain);
  free(data);
  close(c);
  close(s);
  close(l);
}

static void nonblocking_connect(void) {
  addr_t a;
  int l = listener(AF_INET, &a);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int r = connect(c, (struct sockaddr*)&a.ss, a.len);
  CHECK("nb connect: 0 or EINPROGRESS", r == 0 || errno == EINPROGRESS);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = 7};
  epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
  struct epoll_event out;
  int n = epoll_wait(ep, &out, 1, 5000);
  CHECK("nb connect: epoll says writable", n == 1 && out.data.u32 == 7 &&
                                               (out.events & EPOLLOUT));
  int err = -1;
  socklen_t el = sizeof(err);
  getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el);
  CHECK("nb connect: SO_ERROR 0", err == 0);
  /* The listener becomes readable in epoll, accept4 gives a
   * non-blocking socket. */
  ev.events = EPOLLIN;
  ev.data.u32 = 9;
  epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
  n = epoll_wait(ep, &out, 1, 5000);
  int s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
  CHECK("accept4 SOCK_NONBLOCK", s >= 0 && (fcntl(s, F_GETFL) & O_NONBLOCK));
  char b;
  CHECK_ERRNO("recv on empty non-blocking: EAGAIN", recv(s, &b, 1, 0), EAGAIN);
  /* edge-triggered readability after data */
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u32 = 11;
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
  write(c, "xy", 2);
  n = epoll_wait(ep, &out, 1, 5000);
  CHECK("epoll EPOLLIN|EPOLLET on data", n >= 1);
  close(s);
  close(c);
  close(ep);

  /* Refused: blocking connect gives ECONNREFUSED, a non-blocking one
   * reports it through SO_ERROR. */
  addr_t gone = a;
  close(l);
  c = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_ERRNO("connect to a closed port", connect(c, (struct sockaddr*)&gone.ss, gone.len),
              ECONNREFUSED);
  close(c);
  c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  r = connect(c, (struct sockaddr*)&gone.ss, gone.len);
  if (r != 0 && errno == EINPROGRESS) {
    struct pollfd p = {c, POLLOUT, 0};
    poll(&p, 1, 5000);
    el = sizeof(err);
    getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el);
  } else {
    err = r == 0 ? 0 : errno;
  }
  CHECK("nb connect to a closed port: ECONNREFUSED", err == ECONNREFUSED);
  close(c);
}

/* A writer that sends the rest of a message later. */
static void* write_later(void* q) {
  usleep(100000);
  if (write(*(int*)q, "cdef", 4) != 4) return (void*)1;
  return NULL;
}

static volatile sig_atomic_t got_sigpipe, got_alarm;
static void on_sigpipe(int s) { got_sigpipe = 1; }
static void on_alarm(int s) { got_alarm = 1; }

static void stream_semantics(void) {
  addr_t a;
  int l = listener(AF_INET, &a);
  int c = connect_to(&a, 0);
  int s = accept(l, NULL, NULL);

  /* MSG_PEEK leaves the data; FIONREAD counts it; MSG_WAITALL waits for
   * all of it. */
  write(c, "hello", 5);
  char buf[16];
  struct pollfd p = {s, POLLIN, 0};
  poll(&p, 1, 5000);
  int avail = -1;
  ioctl(s, FIONREAD, &avail);
  CHECK("FIONREAD counts the queued bytes", avail == 5);
  ssize_t r = recv(s, buf, 3, MSG_PEEK);
  CHECK("MSG_PEEK", r == 3 && memcmp(buf, "hel", 3) == 0);
  r = recv(s, buf, 5, 0);
  CHECK("read after peek", r == 5 && memcmp(buf, "hello", 5) == 0);
  CHECK_ERRNO("MSG_DONTWAIT on an empty socket", recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);
  write(c, "ab", 2);
  struct pollfd pc = {s, POLLIN, 0};
  poll(&pc, 1, 5000);
  pthread_t th;
  int wfd = c;
  pthread_create(&th, NULL, write_later, &wfd);
  r = recv(s, buf, 6, MSG_WAITALL);
  pthread_join(th, NULL);
  CHECK("MSG_WAITALL waits for all", r == 6 && memcmp(buf, "abcdef", 6) == 0);

  /* SO_RCVTIMEO: a blocking recv gives EAGAIN after the timeout. */
  struct timeval tv = {0, 200000};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  struct timeval t0, t1;
  gettimeofday(&t0, NULL);
  r = recv(s, buf, 1, 0);
  int e = errno;
  gettimeofday(&t1, NULL);
  long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_usec - t0.tv_usec) / 1000;
  CHECK("SO_RCVTIMEO: EAGAIN", r == -1 && e == EAGAIN);
  CHECK("SO_RCVTIMEO: waited about the timeout", ms >= 150 && ms < 3000);
  tv.tv_usec = 0;
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  /* A signal (no SA_RESTART) interrupts a blocking recv. */
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 0}, {0, 100000}};
  setitimer(ITIMER_REAL, &it, NULL);
  r = recv(s, buf, 1, 0);
  e = errno;
  CHECK("a signal interrupts a blocking recv: EINTR", r == -1 && e == EINTR && got_alarm);

  /* shutdown(SHUT_WR): the peer reads EOF but can still send back. */
  CHECK("shutdown(SHUT_WR)", shutdown(c, SHUT_WR) == 0);
  r = read(s, buf, sizeof(buf));
  CHECK("peer reads EOF after SHUT_WR", r == 0);
  CHECK("peer can still write", write(s, "back", 4) == 4);
  r = read_all(c, buf, 4);
  CHECK("half-closed side still reads", r == 4 && memcmp(buf, "back", 4) == 0);
  CHECK_ERRNO("write after SHUT_WR with MSG_NOSIGNAL: EPIPE",
              send(c, "x", 1, MSG_NOSIGNAL), EPIPE);
  CHECK("no SIGPIPE with MSG_NOSIGNAL", !got_sigpipe);
  signal(SIGPIPE, on_sigpipe);
  CHECK_ERRNO("write after SHUT_WR: EPIPE", write(c, "x", 1), EPIPE);
  CHECK("SIGPIPE raised", got_sigpipe);
  signal(SIGPIPE, SIG_DFL);
  close(c);
  close(s);

  /* shutdown on an unconnected socket; SHUT_RD reads EOF. */
  int u = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_ERRNO("shutdown unconnected: ENOTCONN", shutdown(u, SHUT_RDWR), ENOTCONN);
  CHECK_ERRNO("getpeername unconnected: ENOTCONN",
              getpeername(u, (struct sockaddr*)&a.ss, &a.len), ENOTCONN);
  close(u);
  c = connect_to(&a, 0);
  s = accept(l, NULL, NULL);
  shutdown(s, SHUT_RD);
  CHECK("read after SHUT_RD: EOF", read(s, buf, 1) == 0);
  close(c);
  close(s);

  /* bind to a port in use */
  int b = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_ERRNO("bind to a listening port: EADDRINUSE",
              bind(b, (struct sockaddr*)&a.ss, a.len), EADDRINUSE);
  close(b);
  close(l);
}

/* Edge-triggered epoll on a connection just made: the first wait reports
 * EPOLLOUT on both ends, a second finds nothing new (the connection's
 * setup happened before the first). 50 times, since a late host
 * notification showed as a second edge in about half of them. */
static void edge_after_connect(void) {
  int spurious = 0, first_ok = 1;
  for (int round = 0; round < 50; round++) {
    addr_t a;
    int l = listener(AF_INET, &a);
    int c = connect_to(&a, SOCK_CLOEXEC);
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (l < 0 || c < 0 || s < 0 || ep < 0) {
      first_ok = 0;
      break;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET};
    ev.data.fd = s;
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
    ev.data.fd = c;
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
    struct epoll_event out[4];
    int n = epoll_wait(ep, out, 4, 1000);
    if (n != 2 || out[0].events != EPOLLOUT || out[1].events != EPOLLOUT) first_ok = 0;
    if (epoll_wait(ep, out, 4, 100) != 0) spurious++;
    close(ep);
    close(s);
    close(c);
    close(l);
  }
  CHECK("epoll EPOLLET after connect: EPOLLOUT on both ends", first_ok);
  CHECK("epoll EPOLLET after connect: no second edge (50 rounds)", spurious == 0);
}

/* poll(2) and select(2)'s sleep on an epoll fd that watches a TCP
 * socket, and epoll_wait on an epoll fd nested in another: each sleeps
 * until another thread sends (0.1 s later), then sees the data; woken by
 * it, not found at its 5 s deadline. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_on_epoll_fd(void) {
  addr_t a;
  int l = listener(AF_INET, &a);
  int c = connect_to(&a, SOCK_CLOEXEC);
  int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int outer = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN};
  ev.data.fd = s;
  epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
  ev.data.fd = ep;
  epoll_ctl(outer, EPOLL_CTL_ADD, ep, &ev);
  char buf[8];
  for (int round = 0; round < 3; round++) {
    pthread_t th;
    int wfd = c;
    pthread_create(&th, NULL, write_later, &wfd);
    int ok;
    double start = now_s();
    if (round == 0) {
      struct pollfd p = {ep, POLLIN, 0};
      ok = poll(&p, 1, 5000) == 1 && p.revents == POLLIN;
    } else if (round == 1) {
      fd_set rs;
      FD_ZERO(&rs);
      FD_SET(ep, &rs);
      struct timeval tv = {5, 0};
      ok = select(ep + 1, &rs, NULL, NULL, &tv) == 1 && FD_ISSET(ep, &rs);
    } else {
      struct epoll_event out;
      ok = epoll_wait(outer, &out, 1, 5000) == 1 && out.data.fd == ep;
    }
    ok = ok && now_s() - start < 2.5;
    pthread_join(th, NULL);
    const char* name = round == 0   ? "poll on an epoll fd wakes at a TCP socket's data"
                       : round == 1 ? "select on an epoll fd wakes at a TCP socket's data"
                                    : "nested epoll wakes at a TCP socket's data";
    CHECK(name, ok);
    CHECK("... and the data is there", read_all(s, buf, 4) == 4 && memcmp(buf, "cdef", 4) == 0);
  }
  close(outer);
  close(ep);
  close(s);
  close(c);
  close(l);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  echo_test(AF_INET, "ipv4");
  echo_test(AF_INET6, "ipv6");
  many_connections();
  large_transfer();
  nonblocking_connect();
  stream_semantics();
  edge_after_connect();
  sleep_on_epoll_fd();
  return finish();
}
