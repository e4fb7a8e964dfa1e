/* The interface ioctls on sockets: SIOCGIFCONF (the length query with a
 * null buffer, a full listing, a buffer with room for one entry and for
 * less than one, a bad buffer), and SIOCGIFADDR, SIOCGIFFLAGS,
 * SIOCGIFINDEX, SIOCGIFNAME, SIOCGIFNETMASK, SIOCGIFHWADDR, SIOCGIFMTU on
 * lo, asked of AF_INET, AF_INET6 and AF_UNIX sockets. Linux answers
 * SIOCGIFCONF and the device requests (dev_ioctl) for every family, the
 * IPv4 address requests (SIOCGIFADDR, SIOCGIFNETMASK: devinet_ioctl) on
 * AF_INET sockets only: ENOTTY on the others.
 *
 * Only loopback facts and relations are printed: the native run sees the
 * host's interfaces, the sandboxed one its own namespace, whose first
 * interface is lo as in every network namespace.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define ARPHRD_LOOPBACK_ 772 /* <net/if_arp.h> */

static const char* family_name(int f) {
  return f == AF_INET ? "inet" : f == AF_INET6 ? "inet6" : "unix";
}

static int is_lo_127(const struct ifreq* r) {
  const struct sockaddr_in* in = (const struct sockaddr_in*)&r->ifr_addr;
  return strcmp(r->ifr_name, "lo") == 0 && in->sin_family == AF_INET &&
         in->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
}

static void ifconf(int s, const char* fam) {
  char name[128];
  struct ifconf ifc;
  memset(&ifc, 0, sizeof(ifc));
  ifc.ifc_len = 12345;
  int r = ioctl(s, SIOCGIFCONF, &ifc);
  int need = ifc.ifc_len;
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF null buffer gives the size",
           fam);
  CHECK(name, r == 0 && need > 0 && need % (int)sizeof(struct ifreq) == 0);

  struct ifreq reqs[64];
  memset(reqs, 0, sizeof(reqs));
  ifc.ifc_len = sizeof(reqs);
  ifc.ifc_req = reqs;
  r = ioctl(s, SIOCGIFCONF, &ifc);
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF lists as much as it said",
           fam);
  CHECK(name, r == 0 && ifc.ifc_len == need);
  int lo = 0;
  for (int i = 0; i < ifc.ifc_len / (int)sizeof(struct ifreq); i++) {
    if (is_lo_127(&reqs[i])) lo++;
  }
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF lists lo 127.0.0.1 once",
           fam);
  CHECK(name, lo == 1);

  memset(reqs, 0, sizeof(reqs));
  ifc.ifc_len = sizeof(struct ifreq) + sizeof(struct ifreq) / 2;
  ifc.ifc_req = reqs;
  r = ioctl(s, SIOCGIFCONF, &ifc);
  snprintf(name, sizeof(name),
           "%s: SIOCGIFCONF with room for 1.5 entries writes lo only", fam);
  CHECK(name, r == 0 && ifc.ifc_len == (int)sizeof(struct ifreq) &&
                  is_lo_127(&reqs[0]) && reqs[1].ifr_name[0] == 0);

  ifc.ifc_len = sizeof(struct ifreq) - 1;
  ifc.ifc_req = reqs;
  r = ioctl(s, SIOCGIFCONF, &ifc);
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF with no room writes none",
           fam);
  CHECK(name, r == 0 && ifc.ifc_len == 0);

  ifc.ifc_len = -5;
  r = ioctl(s, SIOCGIFCONF, &ifc);
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF negative length writes none",
           fam);
  CHECK(name, r == 0 && ifc.ifc_len == 0);

  /* A buffer in an unmapped page. */
  void* hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ifc.ifc_len = sizeof(reqs);
  ifc.ifc_buf = hole;
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF into a PROT_NONE buffer",
           fam);
  CHECK_ERRNO(name, ioctl(s, SIOCGIFCONF, &ifc), EFAULT);
  munmap(hole, 4096);
  snprintf(name, sizeof(name), "%s: SIOCGIFCONF with a bad ifconf", fam);
  CHECK_ERRNO(name, ioctl(s, SIOCGIFCONF, (void*)8), EFAULT);
}

static void ifreq_lo(int s, int family, const char* fam) {
  char name[128];
  struct ifreq r;

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "lo");
  if (family == AF_INET) {
    snprintf(name, sizeof(name), "%s: SIOCGIFADDR lo is 127.0.0.1", fam);
    CHECK(name, ioctl(s, SIOCGIFADDR, &r) == 0 && is_lo_127(&r));
  } else {
    snprintf(name, sizeof(name), "%s: SIOCGIFADDR is for AF_INET", fam);
    CHECK_ERRNO(name, ioctl(s, SIOCGIFADDR, &r), ENOTTY);
  }

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "lo");
  int ok = ioctl(s, SIOCGIFFLAGS, &r) == 0;
  printf("%s: SIOCGIFFLAGS lo: %s up=%d loopback=%d running=%d\n", fam,
         ok ? "ok" : "FAIL", !!(r.ifr_flags & IFF_UP),
         !!(r.ifr_flags & IFF_LOOPBACK), !!(r.ifr_flags & IFF_RUNNING));
  if (!ok) g_failures++;

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "lo");
  snprintf(name, sizeof(name), "%s: SIOCGIFINDEX lo is 1", fam);
  CHECK(name, ioctl(s, SIOCGIFINDEX, &r) == 0 && r.ifr_ifindex == 1);

  memset(&r, 0, sizeof(r));
  r.ifr_ifindex = 1;
  snprintf(name, sizeof(name), "%s: SIOCGIFNAME 1 is lo", fam);
  CHECK(name, ioctl(s, SIOCGIFNAME, &r) == 0 && strcmp(r.ifr_name, "lo") == 0);

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "lo");
  if (family == AF_INET) {
    snprintf(name, sizeof(name), "%s: SIOCGIFNETMASK lo is 255.0.0.0", fam);
    CHECK(name, ioctl(s, SIOCGIFNETMASK, &r) == 0 &&
                    ((struct sockaddr_in*)&r.ifr_netmask)->sin_addr.s_addr ==
                        htonl(0xff000000));
  } else {
    snprintf(name, sizeof(name), "%s: SIOCGIFNETMASK is for AF_INET", fam);
    CHECK_ERRNO(name, ioctl(s, SIOCGIFNETMASK, &r), ENOTTY);
  }

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "lo");
  ok = ioctl(s, SIOCGIFHWADDR, &r) == 0;
  int zero = 1;
  for (int i = 0; i < 6; i++) zero &= r.ifr_hwaddr.sa_data[i] == 0;
  snprintf(name, sizeof(name),
           "%s: SIOCGIFHWADDR lo is ARPHRD_LOOPBACK, all zeros", fam);
  CHECK(name, ok && r.ifr_hwaddr.sa_family == ARPHRD_LOOPBACK_ && zero);

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "lo");
  ok = ioctl(s, SIOCGIFMTU, &r) == 0;
  printf("%s: SIOCGIFMTU lo: %s %d\n", fam, ok ? "ok" : "FAIL", r.ifr_mtu);
  if (!ok) g_failures++;

  memset(&r, 0, sizeof(r));
  strcpy(r.ifr_name, "nosuchif0");
  snprintf(name, sizeof(name), "%s: SIOCGIFMTU of no interface", fam);
  CHECK_ERRNO(name, ioctl(s, SIOCGIFMTU, &r), ENODEV);
  if (family == AF_INET) {
    snprintf(name, sizeof(name), "%s: SIOCGIFADDR of no interface", fam);
    CHECK_ERRNO(name, ioctl(s, SIOCGIFADDR, &r), ENODEV);
  }
  memset(&r, 0, sizeof(r));
  r.ifr_ifindex = 987654;
  snprintf(name, sizeof(name), "%s: SIOCGIFNAME of no index", fam);
  CHECK_ERRNO(name, ioctl(s, SIOCGIFNAME, &r), ENODEV);
}

int main(void) {
  const int families[] = {AF_INET, AF_INET6, AF_UNIX};
  for (int i = 0; i < 3; i++) {
    int type = families[i] == AF_UNIX ? SOCK_STREAM : SOCK_DGRAM;
    int s = socket(families[i], type | SOCK_CLOEXEC, 0);
    if (s < 0) {
      printf("%s: socket: FAIL (errno %d)\n", family_name(families[i]), errno);
      g_failures++;
      continue;
    }
    ifconf(s, family_name(families[i]));
    ifreq_lo(s, families[i], family_name(families[i]));
    close(s);
  }
  return finish();
}
