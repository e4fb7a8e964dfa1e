// A pseudo-terminal of the sandbox's own devpts whose master side is a
// host descriptor: what a terminal through sandboxd is (`sandboxctl run
// -t`, `exec -t`). The program's terminal is /dev/pts/N inside the
// sandbox, with the sandbox's line discipline and job control, so a ^C
// that reaches the host descriptor as the byte 0x03 becomes SIGINT to the
// sandbox's foreground process group, as on a terminal of runsc or docker.
//
//   host fd (a raw host pty replica; its master is the daemon's)
//     ── read ──► Pty::MasterWrite (line discipline, signals, echo)
//     ◄─ write ── Pty::MasterRead (the program's output)
//
// One host thread per relay moves the bytes; it holds the master file,
// so the pair lives as long as the relay. It ends at the host side's
// hang-up (the daemon and every copy of its master closed) or at Stop;
// the master then closes as a terminal emulator's would (the replica
// hangs up, its session leader gets SIGHUP). Window sizes come from
// whoever drives the host side (Resize: the daemon's control channel),
// since a host pty's size change signals no one here.
//
// Thread safety: every method may be called from any thread.
#ifndef SANDBOXD_SENTRY_FS_TTY_PTY_RELAY_H_
#define SANDBOXD_SENTRY_FS_TTY_PTY_RELAY_H_

#include <sys/ioctl.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "sentry/fs/file.h"
#include "sentry/fs/tty/pty.h"

namespace sandboxd::fs::tty {

class PtyRelay {
 public:
  // `master` is a PtyMasterFile (what /dev/ptmx opened), unlocked;
  // `host` the host descriptor (made non-blocking here). The relay starts
  // at once. Its initial window size is the host descriptor's.
  static absl::StatusOr<std::unique_ptr<PtyRelay>> Start(
      std::shared_ptr<File> master, UniqueFd host);
  ~PtyRelay();  // Stop()
  PtyRelay(const PtyRelay&) = delete;
  PtyRelay& operator=(const PtyRelay&) = delete;

  Pty& pty() { return *pty_; }
  // TIOCSWINSZ on the pair: SIGWINCH to the foreground process group when
  // the size changed.
  void Resize(uint16_t rows, uint16_t cols);
  // Whether the host side hung up (the relay has ended by itself).
  bool done() const { return done_.load(); }
  // Waits until everything the program wrote to the pair has been written
  // to the host side (or the relay has ended, or `max` has passed): the
  // caller tells the process's exit only after its last output, as the
  // daemon's pty would have had it.
  void Drain(absl::Duration max);
  // Ends the relay and closes the master.
  void Stop();

 private:
  PtyRelay(std::shared_ptr<File> master, std::shared_ptr<Pty> pty,
           UniqueFd host, UniqueFd wake);
  void Loop();
  void Wake();

  class Waker;
  std::shared_ptr<File> master_;  // keeps the pair; reset when the relay ends
  const std::shared_ptr<Pty> pty_;  // master_'s
  const UniqueFd host_;
  const UniqueFd wake_;  // eventfd: the pair's readiness changed, or Stop
  std::unique_ptr<Waker> waker_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  // Bytes taken from the pair and not yet written to the host (1 while a
  // read is under way): Drain reads the pair's queue first, then this.
  std::atomic<uint64_t> in_flight_{0};
  std::thread thread_;
};

}  // namespace sandboxd::fs::tty

#endif  // SANDBOXD_SENTRY_FS_TTY_PTY_RELAY_H_
