// Runs in a signal handler: no allocation, no locks, no stdio.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sentry/host_filter_trap.h"

namespace sandboxd::host_filter {
namespace {

// Written before the filter is loaded, read only by the handler.
const char* names[kMaxNamedSyscall];

// Appends `s` to buf at *len (bounded by cap).
void Append(char* buf, size_t* len, size_t cap, const char* s) {
  while (*s != '\0' && *len < cap) buf[(*len)++] = *s++;
}

void AppendNumber(char* buf, size_t* len, size_t cap, long v) {
  char digits[24];
  int n = 0;
  unsigned long u = v < 0 ? -static_cast<unsigned long>(v) : v;
  do {
    digits[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && n < 23);
  if (v < 0 && *len < cap) buf[(*len)++] = '-';
  while (n > 0 && *len < cap) buf[(*len)++] = digits[--n];
}

}  // namespace

void SetSyscallName(int nr, const char* name) {
  if (nr >= 0 && nr < kMaxNamedSyscall) names[nr] = name;
}

void OnSigsys(int sig, siginfo_t* info, void* ucontext) {
  char buf[160];
  size_t len = 0;
  const int nr = info->si_syscall;
  Append(buf, &len, sizeof(buf), "sentry: host syscall ");
  AppendNumber(buf, &len, sizeof(buf), nr);
  Append(buf, &len, sizeof(buf), " (");
  const char* name = nr >= 0 && nr < kMaxNamedSyscall ? names[nr] : nullptr;
  Append(buf, &len, sizeof(buf), name != nullptr ? name : "unknown");
  Append(buf, &len, sizeof(buf),
         ") not in the Sentry's seccomp allow-list\n");
  ssize_t unused = write(STDERR_FILENO, buf, len);
  (void)unused;
  abort();
}

}  // namespace sandboxd::host_filter
