#include <errno.h>

#include <optional>

#include "sentry/syscalls/strace.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

Table::Table() {
  RegisterFile(table_);
  RegisterPath(table_);
  RegisterProcess(table_);
  RegisterLock(table_);
  RegisterSocket(table_);
  RegisterPoll(table_);
  RegisterMemory(table_);
  RegisterThread(table_);
  RegisterSignal(table_);
  RegisterInfo(table_);
  RegisterCreds(table_);
  RegisterSched(table_);
  RegisterMount(table_);
  RegisterPrctl(table_);
  RegisterMempolicy(table_);
  RegisterSplice(table_);
  RegisterMemfd(table_);
  RegisterInotify(table_);
  RegisterTime(table_);
  RegisterSignalfd(table_);
  RegisterMembarrier(table_);
}

int64_t Table::Invoke(Task& t, const SyscallArgs& args) {
  std::optional<TraceCall> trace;
  if (trace_) trace.emplace(t, args);
  int64_t r;
  if (args.nr < kMaxSyscall && table_[args.nr].fn != nullptr) {
    r = table_[args.nr].fn(t, args);
  } else {
    t.kernel().CountUnimplemented(args.nr);
    r = -ENOSYS;
  }
  if (trace) trace->Finish(r);
  return r;
}

}  // namespace sandboxd::syscalls
