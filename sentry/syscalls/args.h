// The first steps of a syscall handler: copying an object in from or out
// to application memory (a bad pointer is -EFAULT), finding the file
// behind an fd (-EBADF) or a file of one kind (the errno Linux gives for
// another kind), and handing a failed step's -errno back to the caller;
// and the last step of pipe2 and socketpair, installing a pair of fds.
// Everything here is inline and allocates nothing: a handler written with
// these costs what it cost written out.
#ifndef SANDBOXD_SENTRY_SYSCALLS_ARGS_H_
#define SANDBOXD_SENTRY_SYSCALLS_ARGS_H_

#include <errno.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "sentry/fs/file.h"
#include "sentry/kernel/task.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

// A failed step: the negative errno a handler returns, as in
// `return Errno{-EBADF};`. It converts to that int64_t, so a step that
// returns SysResult<T> and a handler that returns int64_t fail the same way.
struct Errno {
  int64_t value;
  constexpr operator int64_t() const { return value; }
};

// The value of a handler's step, or the -errno it failed with.
template <class T>
class [[nodiscard]] SysResult {
 public:
  SysResult(T&& value) : value_(std::move(value)) {}
  SysResult(const T& value) : value_(value) {}
  SysResult(Errno e) : err_(e.value) {}

  bool ok() const { return err_ == 0; }
  // The -errno; 0 when ok().
  int64_t error() const { return err_; }
  T& value() & { return value_; }
  T&& value() && { return std::move(value_); }

 private:
  T value_{};
  int64_t err_ = 0;
};

}  // namespace sandboxd::syscalls

#define SYSCALLS_CONCAT_INNER(a, b) a##b
#define SYSCALLS_CONCAT(a, b) SYSCALLS_CONCAT_INNER(a, b)

// Returns `expr`, an int64_t result, from the enclosing function when it
// is a -errno.
#define RETURN_IF_ERRNO(expr)                        \
  do {                                               \
    if (const int64_t sys_r_ = (expr); sys_r_ < 0) { \
      return ::sandboxd::syscalls::Errno{sys_r_};    \
    }                                                \
  } while (0)

// ASSIGN_OR_RETURN_ERRNO(lhs, expr): evaluates `expr` (a SysResult<T>);
// on error returns its -errno, otherwise moves the value into `lhs`.
#define ASSIGN_OR_RETURN_ERRNO(lhs, expr)                                    \
  SYSCALLS_ASSIGN_OR_RETURN_IMPL(SYSCALLS_CONCAT(sys_result_, __LINE__), lhs, \
                                 expr)
#define SYSCALLS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)            \
  auto tmp = (expr);                                              \
  if (!tmp.ok()) return ::sandboxd::syscalls::Errno{tmp.error()}; \
  lhs = std::move(tmp).value()

namespace sandboxd::syscalls {

// Copies one object of a trivially copyable type (a struct, or an array
// passed as &array) between application memory and the Sentry: 0, or
// -EFAULT when any of it is unreadable (unwritable).
template <class T>
inline int64_t CopyInObj(Task& t, uint64_t addr, T* v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return t.mm().CopyIn(addr, v, sizeof(T)) == static_cast<int64_t>(sizeof(T))
             ? 0
             : -EFAULT;
}
template <class T>
inline int64_t CopyOutObj(Task& t, uint64_t addr, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return t.mm().CopyOut(addr, &v, sizeof(T)) == static_cast<int64_t>(sizeof(T))
             ? 0
             : -EFAULT;
}

// The same for `n` bytes of a buffer: 0 or -EFAULT (a short copy is a
// fault).
inline int64_t CopyInBytes(Task& t, uint64_t addr, void* dst, uint64_t n) {
  return t.mm().CopyIn(addr, dst, n) == static_cast<int64_t>(n) ? 0 : -EFAULT;
}
inline int64_t CopyOutBytes(Task& t, uint64_t addr, const void* src,
                            uint64_t n) {
  return t.mm().CopyOut(addr, src, n) == static_cast<int64_t>(n) ? 0 : -EFAULT;
}

// The file behind fd, or null. `fd` is the whole register: values above
// INT32_MAX name no file. Linux reads the fd argument as an unsigned int;
// handlers that do the same pass static_cast<uint32_t>(arg).
inline std::shared_ptr<fs::File> FileOrNull(Task& t, uint64_t fd) {
  return fd > INT32_MAX ? nullptr : t.group().fds().Get(static_cast<int>(fd));
}

// The same, or -EBADF.
inline SysResult<std::shared_ptr<fs::File>> FileFor(Task& t, uint64_t fd) {
  std::shared_ptr<fs::File> f = FileOrNull(t, fd);
  if (f == nullptr) return Errno{-EBADF};
  return f;
}

// The file behind fd as a `Kind` (a socket, an epoll or timer file...):
// -EBADF for no file, `wrong_kind` (a -errno: -ENOTSOCK, -EINVAL, as Linux
// answers for the call) for a file of another kind.
template <class Kind>
inline SysResult<std::shared_ptr<Kind>> FileAs(Task& t, uint64_t fd,
                                               int64_t wrong_kind) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, fd));
  Kind* k = dynamic_cast<Kind*>(f.get());
  if (k == nullptr) return Errno{wrong_kind};
  return std::shared_ptr<Kind>(f, k);
}

// The last step of pipe2 and socketpair: installs `a` and `b` and writes
// their two fds (int[2]) to `addr`. On a failure neither stays installed:
// the -errno of Install, or -EFAULT.
inline int64_t InstallFdPair(Task& t, std::shared_ptr<fs::File> a,
                             std::shared_ptr<fs::File> b, bool cloexec,
                             uint64_t addr) {
  fs::FdTable& fds = t.group().fds();
  int64_t fa = fds.Install(std::move(a), cloexec);
  if (fa < 0) return fa;
  int64_t fb = fds.Install(std::move(b), cloexec);
  if (fb < 0) {
    fds.Close(static_cast<int>(fa));
    return fb;
  }
  int32_t out[2] = {static_cast<int32_t>(fa), static_cast<int32_t>(fb)};
  if (CopyOutObj(t, addr, out) < 0) {
    fds.Close(static_cast<int>(fa));
    fds.Close(static_cast<int>(fb));
    return -EFAULT;
  }
  return 0;
}

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_ARGS_H_
