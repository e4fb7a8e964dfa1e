// Signal-driven I/O (Linux's fasync and fown_struct): O_ASYNC (F_SETFL,
// FIOASYNC), the owner (F_SETOWN, F_SETOWN_EX, FIOSETOWN, SIOCSPGRP) and
// the signal (F_SETSIG) of one open file description.
//
// A FileAsync is a Waiter on its file's queue while O_ASYNC is on: each
// notification of an event the file sends SIGIO for becomes an
// AsyncSignal posted to the kernel's AsyncSignaller, which sends it to the
// owner from a thread that holds no lock of the notifier's (fs cannot see
// tasks, and a file notifies under its own locks, even from a process's
// exit under the tasklist lock).
//
// Lock order: the file's WaitQueue lock > FileAsync::mu_ > the
// signaller's queue lock. reg_mu_ serializes (un)registration and is held
// across EventRegister, so it comes before the WaitQueue lock.
#ifndef SANDBOXD_SENTRY_FS_FILE_ASYNC_H_
#define SANDBOXD_SENTRY_FS_FILE_ASYNC_H_

#include <fcntl.h>
#include <sys/types.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::fs {

class File;

// Who gets the signals (fown_struct): a thread (F_OWNER_TID), a process
// (F_OWNER_PID) or a process group (F_OWNER_PGRP); pid 0: nobody. uid
// and euid are the real and effective uids of whoever set it, which
// Linux's sigio_perm checks against the target's.
struct AsyncOwner {
  int type = F_OWNER_PID;
  pid_t pid = 0;
  uid_t uid = 0;
  uid_t euid = 0;
};

// One signal for the kernel to send: sig 0 is a plain SIGIO (si_code
// SI_KERNEL); else F_SETSIG's signal with si_code `reason` (POLL_IN, ...),
// si_band `band` and si_fd `fd`.
struct AsyncSignal {
  AsyncOwner owner;
  int sig = 0;
  int fd = -1;
  int reason = 0;
  long band = 0;
};

// The kernel's side. Post is called with the notifier's locks held: it
// must only queue.
class AsyncSignaller {
 public:
  virtual ~AsyncSignaller() = default;
  virtual void Post(const AsyncSignal& s) = 0;
};
// Installs the process's signaller (the kernel, at its construction);
// null uninstalls. Signals posted while none is installed are dropped.
void SetAsyncSignaller(AsyncSignaller* s);

// F_SETSIG's signal, O_ASYNC's state and the owner of one file. Safe to
// call from any thread.
class FileAsync final : public waiter::Waiter {
 public:
  FileAsync() = default;
  FileAsync(const FileAsync&) = delete;
  FileAsync& operator=(const FileAsync&) = delete;
  // Leaves the queue it registered on (the file is going away).
  ~FileAsync() override;

  // What a checkpoint saves (sentry/state/file_state.cc).
  struct Saved {
    bool enabled = false;
    int fd = -1;
    AsyncOwner owner;
    int sig = 0;
  };
  Saved Get() const ABSL_LOCKS_EXCLUDED(mu_);

  bool enabled() const ABSL_LOCKS_EXCLUDED(mu_);
  AsyncOwner owner() const ABSL_LOCKS_EXCLUDED(mu_);
  void set_owner(const AsyncOwner& o) ABSL_LOCKS_EXCLUDED(mu_);
  int sig() const ABSL_LOCKS_EXCLUDED(mu_);
  void set_sig(int sig) ABSL_LOCKS_EXCLUDED(mu_);

  // O_ASYNC on or off for `f` (whose FileAsync this is). On: signals
  // name `fd` (si_fd), as Linux's fasync_helper records the descriptor of
  // the call that set it; events are f.AsyncEvents(), and a file with
  // none never signals (the syscalls do not set it there).
  void SetEnabled(File& f, bool on, int fd) ABSL_LOCKS_EXCLUDED(reg_mu_, mu_);

  void Notify(waiter::EventMask events) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex reg_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The queue this waiter sits on (the file's event_queue), so that the
  // destructor can leave it; null when not registered.
  std::shared_ptr<waiter::WaitQueue> queue_ ABSL_GUARDED_BY(reg_mu_);
  File* registered_file_ ABSL_GUARDED_BY(reg_mu_) = nullptr;
  mutable absl::Mutex mu_;
  bool enabled_ ABSL_GUARDED_BY(mu_) = false;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  AsyncOwner owner_ ABSL_GUARDED_BY(mu_);
  int sig_ ABSL_GUARDED_BY(mu_) = 0;
  waiter::EventMask events_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_FILE_ASYNC_H_
