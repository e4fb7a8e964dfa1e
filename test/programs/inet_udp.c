/* UDP over loopback (127.0.0.1 and ::1): sendto/recvfrom with addresses,
 * connected sockets, MSG_TRUNC, MSG_PEEK, FIONREAD, sendmmsg/recvmmsg,
 * poll readiness; and socket options set and read back on TCP and UDP
 * sockets, with the answers Linux gives to options that do not apply;
 * writev and readv on a UDP socket and on an AF_UNIX datagram socket (one
 * datagram for all the vectors, as Linux's sock_write_iter/sock_read_iter).
 *
 * Ports are chosen by bind to port 0; nothing host-specific is printed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"

/* writev and readv on datagram sockets: `sa` sends to `sb` (connected to
 * `to` first). */
static void vectors(int sa, int sb, const struct sockaddr_storage* to,
                    socklen_t tol, const char* name) {
  char label[96];
#define L(x) (snprintf(label, sizeof(label), "%s %s", name, x), label)
  /* A receive that finds nothing fails (EAGAIN) rather than hanging. */
  struct timeval tmo = {2, 0};
  setsockopt(sb, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
  if (to != NULL) {
    CHECK(L("connect for writev"),
          connect(sa, (const struct sockaddr*)to, tol) == 0);
  }
  struct iovec w[3] = {{"he", 2}, {"", 0}, {"llo", 3}};
  CHECK(L("writev of 3 vectors"), writev(sa, w, 3) == 5);
  char buf[16];
  CHECK(L("writev is one datagram"),
        recv(sb, buf, sizeof(buf), 0) == 5 && memcmp(buf, "hello", 5) == 0);
  CHECK_ERRNO(L("nothing after it"), recv(sb, buf, sizeof(buf), MSG_DONTWAIT),
              EAGAIN);
  CHECK(L("send one datagram"), send(sa, "abcdefg", 7, 0) == 7);
  char r1[3], r2[2];
  struct iovec r[2] = {{r1, 3}, {r2, 2}};
  CHECK(L("readv takes one datagram across vectors (truncated)"),
        readv(sb, r, 2) == 5 && memcmp(r1, "abc", 3) == 0 &&
            memcmp(r2, "de", 2) == 0);
  CHECK_ERRNO(L("the rest of it is gone"),
              recv(sb, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
  /* vfs_writev/vfs_readv: nothing to move is 0, without the socket. */
  CHECK(L("writev of nothing is 0"), writev(sa, w + 1, 1) == 0);
  CHECK_ERRNO(L("and sends no datagram"),
              recv(sb, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
  CHECK(L("send again"), send(sa, "xy", 2, 0) == 2);
  CHECK(L("readv into nothing is 0"), readv(sb, r, 0) == 0);
  CHECK(L("and receives nothing"), recv(sb, buf, sizeof(buf), 0) == 2);
#undef L
}

static void udp(int family, const char* name) {
  char label[96];
#define L(x) (snprintf(label, sizeof(label), "%s %s", name, x), label)
  struct sockaddr_storage a, b;
  socklen_t al, bl;
  int sa = bound_udp(family, &a, &al);
  int sb = bound_udp(family, &b, &bl);
  CHECK(L("bind two sockets"), sa >= 0 && sb >= 0);
  CHECK(L("sendto"), sendto(sa, "ping", 4, 0, (struct sockaddr*)&b, bl) == 4);
  struct pollfd p = {sb, POLLIN, 0};
  CHECK(L("poll readable"), poll(&p, 1, 5000) == 1 && (p.revents & POLLIN));
  int avail = -1;
  ioctl(sb, FIONREAD, &avail);
  CHECK(L("FIONREAD is the next datagram's size"), avail == 4);
  char buf[64];
  struct sockaddr_storage from;
  socklen_t fl = sizeof(from);
  ssize_t r = recvfrom(sb, buf, sizeof(buf), MSG_PEEK, (struct sockaddr*)&from, &fl);
  CHECK(L("MSG_PEEK"), r == 4);
  fl = sizeof(from);
  r = recvfrom(sb, buf, sizeof(buf), 0, (struct sockaddr*)&from, &fl);
  CHECK(L("recvfrom data"), r == 4 && memcmp(buf, "ping", 4) == 0);
  CHECK(L("recvfrom gives the sender's address"),
        fl == al && memcmp(&from, &a, al) == 0);

  /* truncation: the rest of a datagram is dropped; MSG_TRUNC gives the
   * real length. */
  sendto(sa, "0123456789", 10, 0, (struct sockaddr*)&b, bl);
  poll(&p, 1, 5000);
  r = recv(sb, buf, 4, MSG_TRUNC);
  CHECK(L("MSG_TRUNC returns the datagram's length"), r == 10);
  sendto(sa, "0123456789", 10, 0, (struct sockaddr*)&b, bl);
  poll(&p, 1, 5000);
  struct iovec iov = {buf, 4};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  r = recvmsg(sb, &m, 0);
  CHECK(L("recvmsg truncates and flags MSG_TRUNC"),
        r == 4 && (m.msg_flags & MSG_TRUNC));
  CHECK_ERRNO(L("empty socket with MSG_DONTWAIT"), recv(sb, buf, 1, MSG_DONTWAIT), EAGAIN);

  /* connected UDP: send without an address; getpeername. */
  CHECK(L("connect"), connect(sa, (struct sockaddr*)&b, bl) == 0);
  struct sockaddr_storage peer;
  socklen_t pl = sizeof(peer);
  CHECK(L("getpeername after connect"),
        getpeername(sa, (struct sockaddr*)&peer, &pl) == 0 && pl == bl &&
            memcmp(&peer, &b, bl) == 0);
  CHECK(L("send on connected"), send(sa, "c", 1, 0) == 1);
  poll(&p, 1, 5000);
  CHECK(L("recv"), recv(sb, buf, sizeof(buf), 0) == 1 && buf[0] == 'c');

  /* sendmmsg / recvmmsg */
  struct mmsghdr mm[3];
  struct iovec iv[3];
  const char* words[3] = {"one", "three", "seven!"};
  memset(mm, 0, sizeof(mm));
  for (int i = 0; i < 3; i++) {
    iv[i].iov_base = (void*)words[i];
    iv[i].iov_len = strlen(words[i]);
    mm[i].msg_hdr.msg_iov = &iv[i];
    mm[i].msg_hdr.msg_iovlen = 1;
  }
  int n = sendmmsg(sa, mm, 3, 0);
  CHECK(L("sendmmsg sends 3"), n == 3 && mm[0].msg_len == 3 &&
                                   mm[1].msg_len == 5 && mm[2].msg_len == 6);
  char rb[3][16];
  memset(mm, 0, sizeof(mm));
  for (int i = 0; i < 3; i++) {
    iv[i].iov_base = rb[i];
    iv[i].iov_len = sizeof(rb[i]);
    mm[i].msg_hdr.msg_iov = &iv[i];
    mm[i].msg_hdr.msg_iovlen = 1;
  }
  usleep(20000);
  n = recvmmsg(sb, mm, 3, MSG_WAITFORONE, NULL);
  CHECK(L("recvmmsg receives 3"),
        n == 3 && mm[0].msg_len == 3 && mm[1].msg_len == 5 &&
            mm[2].msg_len == 6 && memcmp(rb[1], "three", 5) == 0);
  CHECK_ERRNO(L("recvmmsg MSG_DONTWAIT on empty"),
              recvmmsg(sb, mm, 3, MSG_DONTWAIT, NULL), EAGAIN);
  vectors(sa, sb, &b, bl, name);
  close(sa);
  close(sb);
#undef L
}

static int geti(int s, int level, int name) {
  int v = -12345;
  socklen_t l = sizeof(v);
  if (getsockopt(s, level, name, &v, &l) != 0) return -errno * 1000;
  return v;
}

static int seti(int s, int level, int name, int v) {
  return setsockopt(s, level, name, &v, sizeof(v));
}

static void options(void) {
  int t = socket(AF_INET, SOCK_STREAM, 0);
  CHECK("SO_TYPE", geti(t, SOL_SOCKET, SO_TYPE) == SOCK_STREAM);
  CHECK("SO_DOMAIN", geti(t, SOL_SOCKET, SO_DOMAIN) == AF_INET);
  CHECK("SO_PROTOCOL", geti(t, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_TCP);
  CHECK("SO_ACCEPTCONN before listen", geti(t, SOL_SOCKET, SO_ACCEPTCONN) == 0);
  CHECK("SO_ERROR", geti(t, SOL_SOCKET, SO_ERROR) == 0);
  CHECK("SO_REUSEADDR set/get", seti(t, SOL_SOCKET, SO_REUSEADDR, 1) == 0 &&
                                    geti(t, SOL_SOCKET, SO_REUSEADDR) == 1);
  CHECK("SO_REUSEPORT set/get", seti(t, SOL_SOCKET, SO_REUSEPORT, 1) == 0 &&
                                    geti(t, SOL_SOCKET, SO_REUSEPORT) == 1);
  CHECK("SO_KEEPALIVE set/get", seti(t, SOL_SOCKET, SO_KEEPALIVE, 1) == 0 &&
                                    geti(t, SOL_SOCKET, SO_KEEPALIVE) == 1);
  CHECK("SO_RCVBUF is doubled", seti(t, SOL_SOCKET, SO_RCVBUF, 65536) == 0 &&
                                    geti(t, SOL_SOCKET, SO_RCVBUF) == 131072);
  CHECK("SO_SNDBUF is doubled", seti(t, SOL_SOCKET, SO_SNDBUF, 65536) == 0 &&
                                    geti(t, SOL_SOCKET, SO_SNDBUF) == 131072);
  struct linger lg = {1, 5}, lg2 = {0, 0};
  socklen_t ll = sizeof(lg2);
  CHECK("SO_LINGER set/get",
        setsockopt(t, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0 &&
            getsockopt(t, SOL_SOCKET, SO_LINGER, &lg2, &ll) == 0 &&
            ll == sizeof(lg2) && lg2.l_onoff == 1 && lg2.l_linger == 5);
  struct timeval tv = {1, 500000}, tv2 = {0, 0};
  socklen_t tl = sizeof(tv2);
  CHECK("SO_RCVTIMEO set/get",
        setsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
            getsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &tv2, &tl) == 0 &&
            tv2.tv_sec == 1 && tv2.tv_usec == 500000);
  tv.tv_usec = 2000000;
  CHECK_ERRNO("SO_SNDTIMEO with usec out of range: EDOM",
              setsockopt(t, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), EDOM);
  CHECK("TCP_NODELAY set/get", seti(t, IPPROTO_TCP, TCP_NODELAY, 1) == 0 &&
                                   geti(t, IPPROTO_TCP, TCP_NODELAY) == 1);
  CHECK("TCP_CORK set/get", seti(t, IPPROTO_TCP, TCP_CORK, 1) == 0 &&
                                geti(t, IPPROTO_TCP, TCP_CORK) == 1);
  CHECK("TCP_KEEPIDLE set/get", seti(t, IPPROTO_TCP, TCP_KEEPIDLE, 77) == 0 &&
                                    geti(t, IPPROTO_TCP, TCP_KEEPIDLE) == 77);
  CHECK("TCP_KEEPINTVL set/get", seti(t, IPPROTO_TCP, TCP_KEEPINTVL, 9) == 0 &&
                                     geti(t, IPPROTO_TCP, TCP_KEEPINTVL) == 9);
  CHECK("TCP_KEEPCNT set/get", seti(t, IPPROTO_TCP, TCP_KEEPCNT, 4) == 0 &&
                                   geti(t, IPPROTO_TCP, TCP_KEEPCNT) == 4);
  CHECK_ERRNO("TCP_KEEPIDLE 0: EINVAL", seti(t, IPPROTO_TCP, TCP_KEEPIDLE, 0), EINVAL);
  CHECK("IP_TOS set/get", seti(t, IPPROTO_IP, IP_TOS, 0x10) == 0 &&
                              geti(t, IPPROTO_IP, IP_TOS) == 0x10);
  CHECK("IP_TTL set/get", seti(t, IPPROTO_IP, IP_TTL, 33) == 0 &&
                              geti(t, IPPROTO_IP, IP_TTL) == 33);
  CHECK_ERRNO("set SO_TYPE: ENOPROTOOPT", seti(t, SOL_SOCKET, SO_TYPE, 1), ENOPROTOOPT);
  listen(t, 1);
  CHECK("SO_ACCEPTCONN after listen", geti(t, SOL_SOCKET, SO_ACCEPTCONN) == 1);
  close(t);

  int s6 = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  CHECK("SOCK_NONBLOCK sets O_NONBLOCK", (fcntl(s6, F_GETFL) & O_NONBLOCK) != 0);
  CHECK("IPV6_V6ONLY set/get", seti(s6, IPPROTO_IPV6, IPV6_V6ONLY, 1) == 0 &&
                                   geti(s6, IPPROTO_IPV6, IPV6_V6ONLY) == 1);
  CHECK("IPV6_TCLASS set/get", seti(s6, IPPROTO_IPV6, IPV6_TCLASS, 8) == 0 &&
                                   geti(s6, IPPROTO_IPV6, IPV6_TCLASS) == 8);
  CHECK("SO_PROTOCOL of UDP", geti(s6, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_UDP);
  CHECK("SO_DOMAIN of AF_INET6", geti(s6, SOL_SOCKET, SO_DOMAIN) == AF_INET6);
  int on = 0;
  ioctl(s6, FIONBIO, &on);
  CHECK("FIONBIO clears O_NONBLOCK", (fcntl(s6, F_GETFL) & O_NONBLOCK) == 0);
  close(s6);
  int cl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK("SOCK_CLOEXEC sets FD_CLOEXEC", (fcntl(cl, F_GETFD) & FD_CLOEXEC) != 0);
  close(cl);
  CHECK_ERRNO("socketpair(AF_INET): EOPNOTSUPP",
              socketpair(AF_INET, SOCK_STREAM, 0, (int[2]){0, 0}), EOPNOTSUPP);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  udp(AF_INET, "udp4");
  udp(AF_INET6, "udp6");
  int sv[2];
  CHECK("unix dgram socketpair",
        socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0);
  vectors(sv[0], sv[1], NULL, 0, "unix dgram");
  close(sv[0]);
  close(sv[1]);
  options();
  return finish();
}
