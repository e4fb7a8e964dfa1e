// Save and load of the filesystem objects: tmpfs trees (with their data
// through the PageWriter), the mount tree, locations, pipes, eventfds,
// open file descriptions, descriptor tables and FsContexts.
//
// One struct of static functions, befriended by the fs classes whose state
// is private, so that sentry/fs itself needs neither protobuf nor this
// directory. Every Save of an object the image cannot hold yet (hostfs
// inodes other than the rootfs; ptys, the console) fails with an UnimplementedError that names the object: a
// checkpoint is never silently incomplete. AF_UNIX socket files are
// SocketState's (socket_state.h). procfs and devfs inodes are saved by
// the path they were reached at and looked up again in the filesystems the
// loader's caller builds for the new kernel.
//
// Order at load: the Vfs first (LoadVfs), then what refers to locations
// (files, FsContexts). Inodes and pipes are loaded on demand by whatever
// refers to them.
#ifndef SANDBOXD_SENTRY_STATE_FS_STATE_H_
#define SANDBOXD_SENTRY_STATE_FS_STATE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/lock.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/state/loader.h"
#include "sentry/state/saver.h"

namespace sandboxd::fs {
class EpollFile;
class EventFd;
class InotifyFile;
class TimerFd;
}  // namespace sandboxd::fs

namespace sandboxd::kernel {
class SignalFd;
}  // namespace sandboxd::kernel

namespace sandboxd::state {

struct FsState {
  // Inodes (State.inodes). Directories bring their whole subtree.
  static absl::StatusOr<uint64_t> SaveInode(Saver& s,
                                            const std::shared_ptr<fs::Inode>& inode);
  static absl::StatusOr<std::shared_ptr<fs::Inode>> LoadInode(Loader& l,
                                                              uint64_t id);
  // A loaded FIFO end's pipe becomes its inode's (`id`: its State.inodes
  // id, for errors), so that later openers share it.
  static absl::Status LinkFifo(const std::shared_ptr<fs::Inode>& inode,
                               uint64_t id,
                               const std::shared_ptr<fs::Pipe>& pipe);
  // A FIFO description's name (fs::PipeEnd::location) in its record, and
  // back: `*tell` is the Vfs to tell of its events (null for a name no
  // directory reaches, or none).
  static absl::Status SaveFifoLocation(Saver& s, const fs::Vfs& vfs, const fs::Location& loc,
                                       pb::PipeEnd* r);
  static absl::StatusOr<fs::Location> LoadFifoLocation(Loader& l, fs::Vfs& vfs,
                                                       const pb::PipeEnd& r,
                                                       const std::shared_ptr<fs::Inode>& fifo,
                                                       const fs::Vfs** tell);

  // The mount tree (State.mounts, State.vfs).
  static absl::Status SaveVfs(Saver& s, const fs::Vfs& vfs);
  static absl::StatusOr<std::unique_ptr<fs::Vfs>> LoadVfs(Loader& l);

  // A Location as (mount, path from the mount's root). Locations outside
  // `vfs`'s tree or whose name was removed fail: callers that can live
  // with a detached name (open files) check Reachable first.
  static absl::StatusOr<pb::Location> SaveLocation(Saver& s, const fs::Vfs& vfs,
                                                   const fs::Location& loc);
  static absl::StatusOr<fs::Location> LoadLocation(Loader& l, fs::Vfs& vfs,
                                                   const pb::Location& rec);

  // Pipes (State.pipes); their ends are files.
  static absl::StatusOr<uint64_t> SavePipe(Saver& s,
                                           const std::shared_ptr<fs::Pipe>& p);
  static absl::StatusOr<std::shared_ptr<fs::Pipe>> LoadPipe(Loader& l,
                                                            uint64_t id);

  // Open file descriptions (State.files).
  static absl::StatusOr<uint64_t> SaveFile(Saver& s, const fs::Vfs& vfs,
                                           const std::shared_ptr<fs::File>& f);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadFile(Loader& l,
                                                            fs::Vfs& vfs,
                                                            uint64_t id);

  // Descriptor tables (State.fd_tables) and FsContexts (State.fs_contexts),
  // each shared by the threads (CLONE_FILES, CLONE_FS) that share it.
  static absl::StatusOr<uint64_t> SaveFdTable(
      Saver& s, const fs::Vfs& vfs, const std::shared_ptr<fs::FdTable>& t);
  // With Loader::defer_proc_fds, a descriptor whose file is a procfs
  // file is left out, for LoadDeferredFds to install once every process
  // is loaded.
  static absl::StatusOr<std::shared_ptr<fs::FdTable>> LoadFdTable(
      Loader& l, fs::Vfs& vfs, uint64_t id);
  static absl::Status LoadDeferredFds(Loader& l, fs::Vfs& vfs);
  static absl::StatusOr<uint64_t> SaveFsContext(
      Saver& s, const fs::Vfs& vfs, const std::shared_ptr<fs::FsContext>& c);
  static absl::StatusOr<std::shared_ptr<fs::FsContext>> LoadFsContext(
      Loader& l, fs::Vfs& vfs, uint64_t id);

  // Every lock of `table` (State.locks), after the descriptor tables and
  // files that own them were saved (a lock never saves its owner).
  // Waiters are not state: a blocked task retries its request.
  static absl::Status SaveLocks(Saver& s, fs::LockTable& table);
  // Sets the saved locks in `table` (the Sentry's LockTable::Global(), or
  // a test's), owned by the loaded tables and files.
  static absl::Status LoadLocks(Loader& l, fs::Vfs& vfs, fs::LockTable& table);

 private:
  // Open files of the event kinds, each a case of SaveFile and LoadFile:
  // eventfd, timerfd, signalfd (event_file_state.cc), epoll
  // (epoll_state.cc), inotify (inotify_state.cc).
  static absl::Status SaveEventFd(fs::EventFd* ev, pb::File* rec);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadEventFd(
      const pb::File& rec);
  static absl::Status SaveTimerFd(fs::TimerFd* tf, pb::File* rec);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadTimerFd(
      const pb::File& rec);
  static absl::Status SaveSignalFd(kernel::SignalFd* sf, pb::File* rec);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadSignalFd(
      Loader& l, const pb::File& rec);
  static absl::Status SaveEpoll(Saver& s, const fs::Vfs& vfs,
                                fs::EpollFile* ep, pb::File* rec);
  // A procfs file among the interests is added once every process is
  // loaded (Loader::DeferredUse).
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadEpoll(
      Loader& l, fs::Vfs& vfs, const pb::File& rec);
  // One loaded interest of `ep` in `file` (disabled if it was).
  static absl::Status AddEpollInterest(fs::EpollFile& ep, const std::shared_ptr<fs::File>& file,
                                       const pb::EpollInterest& i);
  static absl::Status SaveInotify(Saver& s, fs::InotifyFile* in,
                                  pb::File* rec);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadInotify(
      Loader& l, const pb::File& rec);

  // Filesystems saved by path and built anew by the loader's caller
  // (procfs, devfs), by the fstype of their mounts.
  static bool IsPseudoFs(const std::string& fstype);
  static absl::StatusOr<uint64_t> SavePseudoInode(
      Saver& s, const std::shared_ptr<fs::Inode>& inode,
      const std::string& fstype, const std::string& path);
  static absl::StatusOr<std::shared_ptr<fs::Inode>> LoadPseudoInode(
      Loader& l, const pb::PseudoInode& r);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadPseudoFile(
      Loader& l, fs::Vfs& vfs, const pb::InodeFile& r, fs::Location loc);
  static absl::StatusOr<uint64_t> SaveOverlayFs(Saver& s, fs::OverlayFs& o);
  static absl::Status SaveOverlayInode(Saver& s, fs::OverlayInode& o,
                                       pb::OverlayInode* r);
  static absl::StatusOr<std::shared_ptr<fs::Inode>> LoadOverlayInode(
      Loader& l, const pb::OverlayInode& r);
  static bool InTree(const fs::Vfs& vfs, const std::shared_ptr<fs::Mount>& m);
  static absl::StatusOr<uint64_t> SaveSuperblock(
      Saver& s, const std::shared_ptr<fs::TmpFsSuperblock>& sb);
  static absl::StatusOr<uint64_t> SaveMount(Saver& s, const fs::Vfs& vfs,
                                            const std::shared_ptr<fs::Mount>& m);
  static absl::StatusOr<std::shared_ptr<fs::Mount>> LoadMount(Loader& l,
                                                              fs::Vfs& vfs,
                                                              uint64_t id);
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_FS_STATE_H_
