// Save and load of pseudo-terminals: the pairs (State.ptys: settings, the
// line discipline's buffers, unread output, packet mode, the session and
// foreground group they serve, their /dev/pts node), the files of both
// sides, and a process's controlling terminal.
//
// As FsState, one struct of static functions befriended by the classes
// whose state is private (Pty, LineDiscipline, PtsInode, DevPts,
// PtyReplicaFile). A loaded pair takes its index and node in the Loader's
// DevPts (Loader::set_devpts), which must not have used that index. The
// host terminal is saved as "the console": only the sandbox's job control
// on it; the load asks its caller for the console now
// (Loader::set_console), as HostFile asks for inherited descriptors.
#ifndef SANDBOXD_SENTRY_STATE_TTY_STATE_H_
#define SANDBOXD_SENTRY_STATE_TTY_STATE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sentry/fs/file.h"
#include "sentry/fs/tty/host_tty.h"
#include "sentry/fs/tty/pty.h"
#include "sentry/fs/vfs.h"
#include "sentry/state/loader.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {

struct TtyState {
  // The record of a terminal's file (`f` is a fs::tty::TtyFile): a pty
  // side or a description of the console.
  static absl::Status SaveTtyFile(Saver& s, const fs::Vfs& vfs,
                                  const std::shared_ptr<fs::File>& f,
                                  pb::File* rec);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadPtyFile(
      Loader& l, fs::Vfs& vfs, const pb::PtyFile& r);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadConsoleFile(
      Loader& l, const pb::ConsoleFile& r);

  // A controlling terminal: a pty (its State.ptys id in *pty) or the
  // console (*console).
  static absl::Status SaveTerminal(Saver& s,
                                   const std::shared_ptr<fs::tty::Terminal>& t,
                                   uint64_t* pty, bool* console);
  static absl::StatusOr<std::shared_ptr<fs::tty::Pty>> LoadPty(Loader& l,
                                                               uint64_t id);
  // The caller's console, with the saved job control (once per load).
  static absl::StatusOr<std::shared_ptr<fs::tty::HostTerminal>> LoadConsole(
      Loader& l);

 private:
  static absl::Status SaveConsole(Saver& s, fs::tty::HostTerminal& t);
  static absl::StatusOr<uint64_t> SavePty(
      Saver& s, const std::shared_ptr<fs::tty::Pty>& pty);
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_TTY_STATE_H_
