// The daemon's side of one sandboxed process's stdio: pipes (stdin,
// stdout, stderr) or a pseudo-terminal whose master the daemon keeps. A
// relay thread reads the output into an OutputLog; stdin and terminal
// resizes go the other way from whoever is attached.
//
// Output ends at end-of-file on every output fd, or, once the process is
// known to have exited, after a short quiet period: a background process
// that inherited the process's stdout must not keep its exit from being
// reported.
//
// Thread safety: every method may be called from any thread.
#ifndef SANDBOXD_DAEMON_RELAY_H_
#define SANDBOXD_DAEMON_RELAY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "daemon/output_log.h"

namespace sandboxd {
namespace daemon {

// Both sides of a process's stdio, made before the process starts.
struct StdioPair {
  // The Sentry's side, sent with Start or Exec (in the order the control
  // protocol documents: stdin, stdout, stderr; or the one terminal fd) and
  // then closed in the daemon.
  std::vector<UniqueFd> theirs;
  UniqueFd in;   // stdin's write end (a dup of the master with a tty)
  UniqueFd out;  // stdout's read end, or the terminal's master
  UniqueFd err;  // stderr's read end; invalid with a tty
  bool tty = false;

  // Pipes, or a pty (24x80 until the first resize) when `tty`.
  static absl::StatusOr<StdioPair> Make(bool tty);
  std::vector<int> TheirFds() const;
};

class ProcessRelay {
 public:
  // Takes the daemon's side of `stdio` (its `theirs` stay with the caller).
  ProcessRelay(StdioPair* stdio, size_t log_capacity);
  ~ProcessRelay();  // Stop()
  ProcessRelay(const ProcessRelay&) = delete;
  ProcessRelay& operator=(const ProcessRelay&) = delete;

  void Start();  // the relay thread
  OutputLog& log() { return log_; }
  // The daemon's ends of the output (stdout's and stderr's read ends, or
  // the terminal's master), for a Sentry to keep while no daemon runs.
  std::vector<int> OutputFds() const;
  // stdin's write end (-1 once closed), for a Sentry to keep (an open
  // stdin, SandboxSpec.open_stdin); valid until CloseStdin.
  int StdinFd();

  // Writes all of `data` to the process's stdin; fails when stdin is closed
  // or the process no longer reads it (EPIPE), or the relay is stopped.
  absl::Status WriteStdin(absl::string_view data);
  void CloseStdin();
  // TIOCSWINSZ on the master; FAILED_PRECONDITION without a tty.
  absl::Status Resize(uint32_t rows, uint32_t cols);

  // The process has exited: the output ends at EOF or after a quiet spell.
  void ProcessExited();
  // After ProcessExited: waits up to `timeout` until the relay has copied
  // the output to the log and closed it, so that an exit told after it
  // comes with all the output before it (as containerd's shim waits for
  // its IO copies before it reports an exit). False on the timeout, or
  // when the relay was never started.
  bool AwaitOutputEnd(absl::Duration timeout);
  // Ends the output now.
  void Stop();

 private:
  void RelayLoop();
  void Wake();

  OutputLog log_;
  const bool tty_;
  UniqueFd out_, err_;
  UniqueFd wake_;  // eventfd: ProcessExited / Stop
  std::atomic<bool> exited_{false};
  std::atomic<bool> stopped_{false};
  absl::Notification output_ended_;  // RelayLoop returned

  absl::Mutex in_mu_;  // one writer at a time; CloseStdin waits for it
  UniqueFd in_ ABSL_GUARDED_BY(in_mu_);

  std::thread thread_;
};

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_RELAY_H_
