// The Linux syscall table: number -> handler. A handler decodes arguments,
// calls into kernel/mm/fs and returns a value or -errno. Unimplemented
// numbers return -ENOSYS and are counted (Kernel::CountUnimplemented); they
// never stop the Sentry. Bad pointers give -EFAULT.
#ifndef SANDBOXD_SENTRY_SYSCALLS_SYSCALLS_H_
#define SANDBOXD_SENTRY_SYSCALLS_SYSCALLS_H_

#include <cstdint>

#include "sentry/kernel/kernel.h"

namespace sandboxd::socket {
class UnixNamespace;
}  // namespace sandboxd::socket

namespace sandboxd::syscalls {

// The sandbox's AF_UNIX names (sys_socket.cc): what a checkpoint load
// binds the loaded sockets' names in again.
socket::UnixNamespace& SandboxUnixNamespace();

using kernel::SyscallArgs;
using kernel::Task;
using Handler = int64_t (*)(Task& t, const SyscallArgs& a);

inline constexpr int kMaxSyscall = 512;

struct Entry {
  Handler fn = nullptr;
  const char* name = nullptr;
};

class Table : public kernel::SyscallTable {
 public:
  Table();
  int64_t Invoke(Task& t, const SyscallArgs& args) override;
  const Entry& entry(uint64_t nr) const { return table_[nr]; }
  // Prints every syscall with its result to stderr (sentry run --strace).
  void set_trace(bool on) { trace_ = on; }

 private:
  bool trace_ = false;
  Entry table_[kMaxSyscall];
};

// Registration, one function per area (sys_*.cc).
void RegisterFile(Entry* table);
void RegisterPath(Entry* table);
void RegisterProcess(Entry* table);
void RegisterLock(Entry* table);
void RegisterSocket(Entry* table);
void RegisterPoll(Entry* table);
void RegisterMemory(Entry* table);
void RegisterThread(Entry* table);
void RegisterSignal(Entry* table);
void RegisterInfo(Entry* table);
void RegisterCreds(Entry* table);
void RegisterSched(Entry* table);
void RegisterMount(Entry* table);
void RegisterPrctl(Entry* table);
void RegisterMempolicy(Entry* table);
void RegisterSplice(Entry* table);
void RegisterMemfd(Entry* table);
void RegisterInotify(Entry* table);
void RegisterTime(Entry* table);
void RegisterSignalfd(Entry* table);
void RegisterMembarrier(Entry* table);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_SYSCALLS_H_
