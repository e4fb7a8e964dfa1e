// sentry run --strace: one line per syscall on stderr, in strace(1)'s
// style: the task's tid, the name, the arguments decoded by kind (paths
// and strings quoted and cut at 32 bytes, fds, AT_FDCWD, open flags,
// modes, signals, argv arrays, the bytes a read filled in) and the
// result, an error as -1 with its name and text. Syscalls without a
// signature print their first four registers in hex.
#ifndef SANDBOXD_SENTRY_SYSCALLS_STRACE_H_
#define SANDBOXD_SENTRY_SYSCALLS_STRACE_H_

#include <cstdint>
#include <string>

#include "sentry/kernel/task.h"

namespace sandboxd::syscalls {

// The x86-64 name of syscall `nr` (syscall_names.cc), or null.
const char* SyscallName(uint64_t nr);

class TraceCall {
 public:
  // Before the call: decodes what the call reads (paths, strings, argv),
  // while the memory they are in is still the caller's.
  TraceCall(kernel::Task& t, const kernel::SyscallArgs& args);
  // After it: decodes what it filled in and prints the line.
  void Finish(int64_t result);

  // The line Finish prints, without its newline (for tests).
  std::string Format(int64_t result);

 private:
  // `s` as a C string literal, escaped, cut at kMaxShown bytes ("...").
  static std::string Quote(const std::string& s, bool truncated);
  std::string Arg(int i, char kind, int64_t result);
  std::string ReadString(uint64_t addr, uint64_t max_len);

  kernel::Task& t_;
  const kernel::SyscallArgs args_;
  const char* sig_;
  std::string in_[6];  // what the constructor decoded, per argument
};

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_STRACE_H_
