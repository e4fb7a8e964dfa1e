#include <errno.h>

#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

Table::Table() {
  RegisterFile(table_);
  RegisterPath(table_);
  RegisterMemory(table_);
  RegisterThread(table_);
  RegisterSignal(table_);
  RegisterInfo(table_);
}

int64_t Table::Invoke(Task& t, const SyscallArgs& args) {
  if (args.nr < kMaxSyscall && table_[args.nr].fn != nullptr) {
    return table_[args.nr].fn(t, args);
  }
  t.kernel().CountUnimplemented(args.nr);
  return -ENOSYS;
}

}  // namespace sandboxd::syscalls
