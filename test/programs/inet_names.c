/* Names over NETLINK_ROUTE and the resolver: getifaddrs and if_nameindex
 * list lo (RTM_GETLINK and RTM_GETADDR dumps), getaddrinfo("localhost")
 * finds 127.0.0.1 (with AI_ADDRCONFIG too, which asks netlink what
 * addresses exist), and a NETLINK_ROUTE socket refuses nothing it should
 * answer. Only loopback facts are printed: the native run sees the host's
 * other interfaces, the sandboxed one its own namespace.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

/* <linux/netlink.h>, which musl's headers do not include. */
#define NETLINK_ROUTE 0
struct sockaddr_nl {
  sa_family_t nl_family;
  unsigned short nl_pad;
  unsigned int nl_pid;
  unsigned int nl_groups;
};

static void ifaddrs(void) {
  struct ifaddrs* ifa = NULL;
  CHECK("getifaddrs", getifaddrs(&ifa) == 0);
  int lo4 = 0, lo_up = 0, lo_loop = 0;
  for (struct ifaddrs* i = ifa; i != NULL; i = i->ifa_next) {
    if (strcmp(i->ifa_name, "lo") != 0) continue;
    if (i->ifa_flags & IFF_UP) lo_up = 1;
    if (i->ifa_flags & IFF_LOOPBACK) lo_loop = 1;
    if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET) {
      struct sockaddr_in* in = (struct sockaddr_in*)i->ifa_addr;
      if (in->sin_addr.s_addr == htonl(INADDR_LOOPBACK)) lo4 = 1;
    }
  }
  CHECK("getifaddrs lists lo with 127.0.0.1", lo4);
  CHECK("lo is up and a loopback", lo_up && lo_loop);
  if (ifa != NULL) freeifaddrs(ifa);

  struct if_nameindex* ni = if_nameindex();
  int found = 0;
  for (struct if_nameindex* p = ni; p != NULL && p->if_index != 0; p++) {
    if (strcmp(p->if_name, "lo") == 0 && p->if_index == 1) found = 1;
  }
  CHECK("if_nameindex has lo as index 1", found);
  if (ni != NULL) if_freenameindex(ni);
  CHECK("if_nametoindex(lo) == 1", if_nametoindex("lo") == 1);
  char name[IF_NAMESIZE];
  CHECK("if_indextoname(1) == lo",
        if_indextoname(1, name) != NULL && strcmp(name, "lo") == 0);
}

static int has_v4_loopback(const char* host, int flags) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  if (getaddrinfo(host, "80", &hints, &res) != 0) return 0;
  int found = 0;
  for (struct addrinfo* r = res; r != NULL; r = r->ai_next) {
    if (r->ai_family == AF_INET &&
        ((struct sockaddr_in*)r->ai_addr)->sin_addr.s_addr ==
            htonl(INADDR_LOOPBACK) &&
        ntohs(((struct sockaddr_in*)r->ai_addr)->sin_port) == 80) {
      found = 1;
    }
  }
  freeaddrinfo(res);
  return found;
}

static void resolver(void) {
  CHECK("getaddrinfo(localhost)", has_v4_loopback("localhost", 0));
  CHECK("getaddrinfo(localhost, AI_ADDRCONFIG)",
        has_v4_loopback("localhost", AI_ADDRCONFIG));
  CHECK("getaddrinfo(127.0.0.1, AI_NUMERICHOST)",
        has_v4_loopback("127.0.0.1", AI_NUMERICHOST));
  struct sockaddr_in in = {0};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  in.sin_port = htons(80);
  char h[64], s[16];
  CHECK("getnameinfo numeric",
        getnameinfo((struct sockaddr*)&in, sizeof(in), h, sizeof(h), s,
                    sizeof(s), NI_NUMERICHOST | NI_NUMERICSERV) == 0 &&
            strcmp(h, "127.0.0.1") == 0 && strcmp(s, "80") == 0);
}

/* A NETLINK_ROUTE socket: bound, named, and a request that would change
 * the namespace does not go through (EPERM: not root on the host, nor is
 * the Sentry in the sandbox's namespace). */
static void netlink(void) {
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  CHECK("socket(AF_NETLINK, NETLINK_ROUTE)", s >= 0);
  struct sockaddr_nl nl = {0};
  nl.nl_family = AF_NETLINK;
  CHECK("bind netlink", bind(s, (struct sockaddr*)&nl, sizeof(nl)) == 0);
  socklen_t l = sizeof(nl);
  CHECK("getsockname netlink",
        getsockname(s, (struct sockaddr*)&nl, &l) == 0 && l == sizeof(nl) &&
            nl.nl_family == AF_NETLINK && nl.nl_pid != 0);
  close(s);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  ifaddrs();
  resolver();
  netlink();
  return finish();
}
