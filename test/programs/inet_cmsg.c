/* Control messages on UDP over loopback (127.0.0.1 and ::1): the options
 * that make a receive carry them (IP_PKTINFO, IP_RECVTOS, IP_RECVTTL,
 * SO_TIMESTAMP, SO_TIMESTAMPNS, IPV6_RECVPKTINFO, IPV6_RECVHOPLIMIT,
 * IPV6_RECVTCLASS), those a send passes (IP_TTL, IP_TOS, IP_PKTINFO,
 * IPV6_HOPLIMIT, IPV6_TCLASS, IPV6_PKTINFO), MSG_CTRUNC when the buffer
 * is short or missing, EINVAL for a bad value or an unknown type, and
 * IP_RECVERR's error queue (MSG_ERRQUEUE) after a send to a closed port;
 * and SIOCGSTAMP/SIOCGSTAMPNS (the time of the last datagram received, in
 * the old and the 64-bit-time request numbers) on UDP, TCP and AF_UNIX.
 *
 * Ports come from bind to port 0; times are printed as relations only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* <linux/errqueue.h>, which musl's headers do not include. */
struct ext_err {
  unsigned int ee_errno;
  unsigned char ee_origin;
  unsigned char ee_type;
  unsigned char ee_code;
  unsigned char ee_pad;
  unsigned int ee_info;
  unsigned int ee_data;
};
#define EE_ORIGIN_ICMP 2
#define EE_ORIGIN_ICMP6 3

static int on(int s, int level, int name) {
  int one = 1;
  return setsockopt(s, level, name, &one, sizeof(one));
}

/* Sends "ping" from `s` to `to` with the control messages in `c`. */
static long send_with(int s, const struct sockaddr_storage* to,
                      socklen_t tolen, const void* c, size_t clen) {
  char data[] = "ping";
  struct iovec iov = {data, 4};
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_name = (void*)to;
  m.msg_namelen = tolen;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = (void*)c;
  m.msg_controllen = clen;
  return sendmsg(s, &m, 0);
}

/* Receives one datagram into a control buffer of `clen` bytes and prints
 * each control message (level, type and its value as the checks need). */
static void recv_print(int s, const char* what, size_t clen, int flags) {
  char data[64];
  struct iovec iov = {data, sizeof(data)};
  union {
    struct cmsghdr h;
    char b[512];
  } c;
  memset(&c, 0, sizeof(c));
  struct sockaddr_storage from;
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_name = &from;
  m.msg_namelen = sizeof(from);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = clen ? c.b : NULL;
  m.msg_controllen = clen;
  long n = recvmsg(s, &m, flags);
  if (n < 0) {
    printf("%s: recvmsg: FAIL (errno %d)\n", what, errno);
    g_failures++;
    return;
  }
  printf("%s: %ld bytes, controllen %s, flags%s%s\n", what, n,
         m.msg_controllen == 0 ? "0" : "> 0",
         (m.msg_flags & MSG_CTRUNC) ? " CTRUNC" : "",
         (m.msg_flags & MSG_ERRQUEUE) ? " ERRQUEUE" : "");
  struct timeval now;
  gettimeofday(&now, NULL);
  for (struct cmsghdr* h = CMSG_FIRSTHDR(&m); h != NULL;
       h = CMSG_NXTHDR(&m, h)) {
    const unsigned char* d = CMSG_DATA(h);
    size_t dl = h->cmsg_len - CMSG_LEN(0);
    printf("  cmsg level %d type %d len %zu", h->cmsg_level, h->cmsg_type, dl);
    if (h->cmsg_level == IPPROTO_IP && h->cmsg_type == IP_PKTINFO &&
        dl >= sizeof(struct in_pktinfo)) {
      struct in_pktinfo pi;
      memcpy(&pi, d, sizeof(pi));
      printf(": ifindex %d addr %s dst %s", pi.ipi_ifindex,
             pi.ipi_addr.s_addr == htonl(INADDR_LOOPBACK) ? "127.0.0.1" : "?",
             pi.ipi_spec_dst.s_addr == htonl(INADDR_LOOPBACK) ? "127.0.0.1"
                                                              : "?");
    } else if (h->cmsg_level == IPPROTO_IP &&
               (h->cmsg_type == IP_TTL || h->cmsg_type == IP_TOS)) {
      int v = 0;
      if (dl >= sizeof(int)) memcpy(&v, d, sizeof(int));
      else if (dl >= 1) v = d[0];
      printf(": %d", v);
    } else if (h->cmsg_level == IPPROTO_IPV6 &&
               h->cmsg_type == IPV6_PKTINFO &&
               dl >= sizeof(struct in6_pktinfo)) {
      struct in6_pktinfo pi;
      memcpy(&pi, d, sizeof(pi));
      printf(": ifindex %u addr %s", pi.ipi6_ifindex,
             memcmp(&pi.ipi6_addr, &in6addr_loopback, 16) == 0 ? "::1" : "?");
    } else if (h->cmsg_level == IPPROTO_IPV6 &&
               (h->cmsg_type == IPV6_HOPLIMIT || h->cmsg_type == IPV6_TCLASS) &&
               dl >= sizeof(int)) {
      int v;
      memcpy(&v, d, sizeof(v));
      printf(": %d", v);
    } else if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SO_TIMESTAMP &&
               dl >= sizeof(struct timeval)) {
      struct timeval tv;
      memcpy(&tv, d, sizeof(tv));
      long diff = (long)(now.tv_sec - tv.tv_sec);
      printf(": %s", diff >= 0 && diff <= 5 ? "within 5 s of now" : "far");
    } else if (h->cmsg_level == SOL_SOCKET &&
               h->cmsg_type == SO_TIMESTAMPNS &&
               dl >= sizeof(struct timespec)) {
      struct timespec ts;
      memcpy(&ts, d, sizeof(ts));
      long diff = (long)(now.tv_sec - ts.tv_sec);
      printf(": %s, nsec %s", diff >= 0 && diff <= 5 ? "within 5 s of now" : "far",
             ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000 ? "valid" : "bad");
    } else if ((h->cmsg_level == IPPROTO_IP && h->cmsg_type == IP_RECVERR) ||
               (h->cmsg_level == IPPROTO_IPV6 &&
                h->cmsg_type == IPV6_RECVERR)) {
      struct ext_err e;
      memcpy(&e, d, sizeof(e));
      printf(": errno %u origin %u type %u code %u", e.ee_errno, e.ee_origin,
             e.ee_type, e.ee_code);
    }
    printf("\n");
  }
}

static void inet4(void) {
  struct sockaddr_storage ra, sa;
  socklen_t rl, sl;
  int r = bound_udp(AF_INET, &ra, &rl);
  int s = bound_udp(AF_INET, &sa, &sl);
  CHECK("v4: sockets", r >= 0 && s >= 0);
  CHECK("v4: IP_PKTINFO on", on(r, IPPROTO_IP, IP_PKTINFO) == 0);
  CHECK("v4: IP_RECVTOS on", on(r, IPPROTO_IP, IP_RECVTOS) == 0);
  CHECK("v4: IP_RECVTTL on", on(r, IPPROTO_IP, IP_RECVTTL) == 0);
  CHECK("v4: SO_TIMESTAMP on", on(r, SOL_SOCKET, SO_TIMESTAMP) == 0);
  int v = -1;
  socklen_t vl = sizeof(v);
  CHECK("v4: IP_PKTINFO reads back 1",
        getsockopt(r, IPPROTO_IP, IP_PKTINFO, &v, &vl) == 0 && v == 1);

  /* No control messages: the defaults (TTL 64, TOS 0). */
  CHECK("v4: plain send", send_with(s, &ra, rl, NULL, 0) == 4);
  recv_print(r, "v4 plain", 512, 0);

  /* IP_TTL, IP_TOS and IP_PKTINFO on the send. */
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int)) * 2 + CMSG_SPACE(sizeof(struct in_pktinfo))];
  } c;
  memset(&c, 0, sizeof(c));
  struct cmsghdr* h = &c.h;
  h->cmsg_level = IPPROTO_IP;
  h->cmsg_type = IP_TTL;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  int ttl = 7;
  memcpy(CMSG_DATA(h), &ttl, sizeof(ttl));
  h = (struct cmsghdr*)(c.b + CMSG_SPACE(sizeof(int)));
  h->cmsg_level = IPPROTO_IP;
  h->cmsg_type = IP_TOS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  int tos = 0x10;
  memcpy(CMSG_DATA(h), &tos, sizeof(tos));
  h = (struct cmsghdr*)(c.b + 2 * CMSG_SPACE(sizeof(int)));
  h->cmsg_level = IPPROTO_IP;
  h->cmsg_type = IP_PKTINFO;
  h->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
  struct in_pktinfo pi;
  memset(&pi, 0, sizeof(pi));
  pi.ipi_spec_dst.s_addr = htonl(INADDR_LOOPBACK);
  memcpy(CMSG_DATA(h), &pi, sizeof(pi));
  CHECK("v4: send with IP_TTL, IP_TOS, IP_PKTINFO",
        send_with(s, &ra, rl, c.b, sizeof(c.b)) == 4);
  recv_print(r, "v4 ttl 7 tos 0x10", 512, 0);

  /* A buffer with room for one message: the rest is cut (MSG_CTRUNC). */
  CHECK("v4: plain send 2", send_with(s, &ra, rl, NULL, 0) == 4);
  recv_print(r, "v4 short buffer", CMSG_SPACE(sizeof(struct in_pktinfo)), 0);
  CHECK("v4: plain send 3", send_with(s, &ra, rl, NULL, 0) == 4);
  recv_print(r, "v4 no buffer", 0, 0);

  /* SO_TIMESTAMPNS instead of SO_TIMESTAMP. */
  int zero = 0;
  setsockopt(r, SOL_SOCKET, SO_TIMESTAMP, &zero, sizeof(zero));
  setsockopt(r, IPPROTO_IP, IP_PKTINFO, &zero, sizeof(zero));
  setsockopt(r, IPPROTO_IP, IP_RECVTOS, &zero, sizeof(zero));
  setsockopt(r, IPPROTO_IP, IP_RECVTTL, &zero, sizeof(zero));
  CHECK("v4: SO_TIMESTAMPNS on", on(r, SOL_SOCKET, SO_TIMESTAMPNS) == 0);
  CHECK("v4: plain send 4", send_with(s, &ra, rl, NULL, 0) == 4);
  recv_print(r, "v4 timestampns", 512, 0);

  /* A TTL of 0 and a type no kernel knows. */
  memset(&c, 0, sizeof(c));
  c.h.cmsg_level = IPPROTO_IP;
  c.h.cmsg_type = IP_TTL;
  c.h.cmsg_len = CMSG_LEN(sizeof(int));
  CHECK_ERRNO("v4: IP_TTL 0",
              send_with(s, &ra, rl, c.b, CMSG_SPACE(sizeof(int))), EINVAL);
  c.h.cmsg_type = 99;
  CHECK_ERRNO("v4: unknown IP-level type",
              send_with(s, &ra, rl, c.b, CMSG_SPACE(sizeof(int))), EINVAL);
  close(r);
  close(s);
}

static void inet6(void) {
  struct sockaddr_storage ra, sa;
  socklen_t rl, sl;
  int r = bound_udp(AF_INET6, &ra, &rl);
  int s = bound_udp(AF_INET6, &sa, &sl);
  CHECK("v6: sockets", r >= 0 && s >= 0);
  CHECK("v6: IPV6_RECVPKTINFO on", on(r, IPPROTO_IPV6, IPV6_RECVPKTINFO) == 0);
  CHECK("v6: IPV6_RECVHOPLIMIT on",
        on(r, IPPROTO_IPV6, IPV6_RECVHOPLIMIT) == 0);
  CHECK("v6: IPV6_RECVTCLASS on", on(r, IPPROTO_IPV6, IPV6_RECVTCLASS) == 0);
  CHECK("v6: plain send", send_with(s, &ra, rl, NULL, 0) == 4);
  recv_print(r, "v6 plain", 512, 0);

  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int)) * 2 + CMSG_SPACE(sizeof(struct in6_pktinfo))];
  } c;
  memset(&c, 0, sizeof(c));
  struct cmsghdr* h = &c.h;
  h->cmsg_level = IPPROTO_IPV6;
  h->cmsg_type = IPV6_HOPLIMIT;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  int hl = 9;
  memcpy(CMSG_DATA(h), &hl, sizeof(hl));
  h = (struct cmsghdr*)(c.b + CMSG_SPACE(sizeof(int)));
  h->cmsg_level = IPPROTO_IPV6;
  h->cmsg_type = IPV6_TCLASS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  int tc = 0x20;
  memcpy(CMSG_DATA(h), &tc, sizeof(tc));
  h = (struct cmsghdr*)(c.b + 2 * CMSG_SPACE(sizeof(int)));
  h->cmsg_level = IPPROTO_IPV6;
  h->cmsg_type = IPV6_PKTINFO;
  h->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
  struct in6_pktinfo pi;
  memset(&pi, 0, sizeof(pi));
  pi.ipi6_addr = in6addr_loopback;
  memcpy(CMSG_DATA(h), &pi, sizeof(pi));
  CHECK("v6: send with IPV6_HOPLIMIT, IPV6_TCLASS, IPV6_PKTINFO",
        send_with(s, &ra, rl, c.b, sizeof(c.b)) == 4);
  recv_print(r, "v6 hoplimit 9 tclass 0x20", 512, 0);
  hl = 300;
  memcpy(CMSG_DATA(&c.h), &hl, sizeof(hl));
  CHECK_ERRNO("v6: IPV6_HOPLIMIT 300",
              send_with(s, &ra, rl, c.b, CMSG_SPACE(sizeof(int))), EINVAL);
  close(r);
  close(s);
}

/* IP_RECVERR: a send to a closed port comes back as ICMP port
 * unreachable on the error queue. */
static void recverr(int family) {
  const char* fam = family == AF_INET ? "v4" : "v6";
  char name[128];
  struct sockaddr_storage da, sa;
  socklen_t dl, sl;
  int d = bound_udp(family, &da, &dl);
  close(d); /* nobody listens on da now */
  int s = bound_udp(family, &sa, &sl);
  int level = family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
  int opt = family == AF_INET ? IP_RECVERR : IPV6_RECVERR;
  snprintf(name, sizeof(name), "%s: RECVERR on", fam);
  CHECK(name, on(s, level, opt) == 0);
  char buf[8];
  struct iovec iov = {buf, sizeof(buf)};
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  snprintf(name, sizeof(name), "%s: empty error queue", fam);
  CHECK_ERRNO(name, recvmsg(s, &m, MSG_ERRQUEUE), EAGAIN);
  snprintf(name, sizeof(name), "%s: send to a closed port", fam);
  CHECK(name, send_with(s, &da, dl, NULL, 0) == 4);
  struct pollfd p = {s, 0, 0};
  snprintf(name, sizeof(name), "%s: POLLERR", fam);
  CHECK(name, poll(&p, 1, 5000) == 1 && (p.revents & POLLERR));
  snprintf(name, sizeof(name), "%s errqueue", fam);
  recv_print(s, name, 512, MSG_ERRQUEUE);
  snprintf(name, sizeof(name), "%s: error queue empty again", fam);
  CHECK_ERRNO(name, recvmsg(s, &m, MSG_ERRQUEUE), EAGAIN);
  close(s);
}

/* asm/sockios.h: the old numbers (struct timeval/timespec, 16 bytes each
 * on x86-64) and the y2038 ones (_IOR(0x89, 6|7, long long[2])). */
#ifndef SIOCGSTAMP
#define SIOCGSTAMP 0x8906
#endif
#ifndef SIOCGSTAMPNS
#define SIOCGSTAMPNS 0x8907
#endif
#define SIOCGSTAMP_NEW_ 0x80108906UL
#define SIOCGSTAMPNS_NEW_ 0x80108907UL

static long long ns_of(const struct timespec* t) {
  return (long long)t->tv_sec * 1000000000LL + t->tv_nsec;
}

/* SIOCGSTAMP and SIOCGSTAMPNS on a UDP socket of `family`: ENOENT before
 * any datagram; then the time of the last one received, the same in both
 * forms and both numbers; a bad pointer is EFAULT. Linux stamps a datagram
 * as it arrives only once timestamps are on (the first SIOCGSTAMP turns
 * them on); before that the first request stamps the datagram with the
 * time of the request, so the stamp lies between the send and the
 * requests' end. */
static void stamps(int family) {
  const char* fam = family == AF_INET ? "v4" : "v6";
  char name[128];
  struct sockaddr_storage ra, sa;
  socklen_t rl, sl;
  int r = bound_udp(family, &ra, &rl);
  int s = bound_udp(family, &sa, &sl);
  snprintf(name, sizeof(name), "%s stamp: sockets", fam);
  CHECK(name, r >= 0 && s >= 0);
  struct timeval tv;
  struct timespec ts;
  snprintf(name, sizeof(name), "%s: SIOCGSTAMP before any datagram", fam);
  CHECK_ERRNO(name, ioctl(r, SIOCGSTAMP, &tv), ENOENT);
  snprintf(name, sizeof(name), "%s: SIOCGSTAMPNS before any datagram", fam);
  CHECK_ERRNO(name, ioctl(r, SIOCGSTAMPNS, &ts), ENOENT);
  long long prev = 0;
  for (int round = 0; round < 2; round++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    snprintf(name, sizeof(name), "%s stamp: send %d", fam, round);
    CHECK(name, send_with(s, &ra, rl, NULL, 0) == 4);
    char buf[16];
    snprintf(name, sizeof(name), "%s stamp: recv %d", fam, round);
    CHECK(name, recv(r, buf, sizeof(buf), 0) == 4);
    memset(&tv, 0, sizeof(tv));
    memset(&ts, 0, sizeof(ts));
    snprintf(name, sizeof(name), "%s: SIOCGSTAMPNS %d", fam, round);
    CHECK(name, ioctl(r, SIOCGSTAMPNS, &ts) == 0);
    snprintf(name, sizeof(name), "%s: SIOCGSTAMP %d", fam, round);
    CHECK(name, ioctl(r, SIOCGSTAMP, &tv) == 0);
    clock_gettime(CLOCK_REALTIME, &t1);
    const long long ns = ns_of(&ts);
    snprintf(name, sizeof(name),
             "%s: stamp %d lies between the send and the requests' end", fam,
             round);
    CHECK(name, ns >= ns_of(&t0) && ns <= ns_of(&t1));
    snprintf(name, sizeof(name), "%s: stamp %d later than the one before",
             fam, round);
    CHECK(name, ns > prev);
    prev = ns;
    snprintf(name, sizeof(name), "%s: SIOCGSTAMP %d is SIOCGSTAMPNS in us",
             fam, round);
    CHECK(name, tv.tv_sec == ts.tv_sec && tv.tv_usec == ts.tv_nsec / 1000);
    long long nw[2] = {0, 0};
    snprintf(name, sizeof(name), "%s: SIOCGSTAMP_NEW %d the same", fam, round);
    CHECK(name, ioctl(r, SIOCGSTAMP_NEW_, nw) == 0 && nw[0] == tv.tv_sec &&
                    nw[1] == tv.tv_usec);
    snprintf(name, sizeof(name), "%s: SIOCGSTAMPNS_NEW %d the same", fam,
             round);
    CHECK(name, ioctl(r, SIOCGSTAMPNS_NEW_, nw) == 0 &&
                    nw[0] == ts.tv_sec && nw[1] == ts.tv_nsec);
  }
  snprintf(name, sizeof(name), "%s: SIOCGSTAMP to a bad pointer", fam);
  CHECK_ERRNO(name, ioctl(r, SIOCGSTAMP, (void*)8), EFAULT);
  /* The sender received nothing. */
  snprintf(name, sizeof(name), "%s: SIOCGSTAMP of the sender", fam);
  CHECK_ERRNO(name, ioctl(s, SIOCGSTAMP, &tv), ENOENT);
  close(r);
  close(s);
}

/* A TCP socket and AF_UNIX sockets. */
static void stamps_other(void) {
  struct timeval tv;
  int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_ERRNO("tcp: SIOCGSTAMP", ioctl(t, SIOCGSTAMP, &tv), ENOENT);
  close(t);
  int sv[2];
  CHECK("unix: socketpair",
        socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0);
  CHECK("unix: send", write(sv[0], "x", 1) == 1);
  char c;
  CHECK("unix: recv", read(sv[1], &c, 1) == 1);
  errno = 0;
  int rc = ioctl(sv[1], SIOCGSTAMP, &tv);
  printf("unix dgram SIOCGSTAMP: %d errno %d\n", rc, rc < 0 ? errno : 0);
  close(sv[0]);
  close(sv[1]);
  CHECK("unix: stream socketpair",
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  rc = ioctl(sv[1], SIOCGSTAMP, &tv);
  printf("unix stream SIOCGSTAMP: %d errno %d\n", rc, rc < 0 ? errno : 0);
  close(sv[0]);
  close(sv[1]);
}

int main(void) {
  inet4();
  inet6();
  recverr(AF_INET);
  recverr(AF_INET6);
  stamps(AF_INET);
  stamps(AF_INET6);
  stamps_other();
  return finish();
}
