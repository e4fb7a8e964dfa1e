// Open file descriptions and the per-process descriptor table.
//
// A File is what an fd refers to (Linux's struct file): it carries the
// offset and status flags and is shared by dup'ed descriptors. This slice
// has one kind, HostFile (an inherited host descriptor such as stdio); the
// VFS, tmpfs, pipes and sockets add more kinds behind the same interface.
#ifndef SANDBOXD_SENTRY_FS_FILE_H_
#define SANDBOXD_SENTRY_FS_FILE_H_

#include <errno.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "sentry/fs/file_async.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/vfs.h"
#include "sentry/waiter/event_source.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::fs {

// What a blocking file operation needs from the task calling it: a host fd
// that becomes readable when the task is interrupted (group exit, signal),
// for waits on host descriptors, and the task itself as a Blocker, for
// waits on the Sentry's own files.
struct IoContext {
  int interrupt_fd = -1;
  waiter::Blocker* blocker = nullptr;
};

class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  virtual ~File();
  // Each returns bytes transferred or -errno. offset < 0: use and advance
  // the file's own offset.
  virtual int64_t Read(void* buf, uint64_t n, int64_t offset,
                       const IoContext& io) = 0;
  virtual int64_t Write(const void* buf, uint64_t n, int64_t offset,
                        const IoContext& io) = 0;
  virtual int64_t Seek(int64_t offset, int whence) = 0;
  virtual int64_t Stat(struct stat* st) = 0;
  // `arg` is the application's argument; `buf` holds the ioctl's argument
  // data (copied in by the caller for known ioctls, copied out after).
  virtual int64_t Ioctl(uint64_t request, void* buf) = 0;

  // Status flags (O_APPEND, O_NONBLOCK, access mode) as fcntl(F_GETFL).
  virtual int StatusFlags() const = 0;
  virtual int64_t SetStatusFlags(int flags) = 0;

  // getdents64: fills `buf` with linux_dirent64 records from the current
  // position; returns bytes used, 0 at the end, -EINVAL if one record does
  // not fit, -ENOTDIR for non-directories.
  virtual int64_t GetDents(uint8_t* buf, uint64_t size) { return -ENOTDIR; }

  // poll(2) readiness: the events of `mask` (plus POLLERR/POLLHUP) that
  // hold now. Files that never block are always readable and writable.
  virtual waiter::EventMask Readiness(waiter::EventMask mask) {
    return mask & (POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM);
  }
  // Notifications of readiness changes; files that never block have none.
  virtual void EventRegister(waiter::Waiter* w, waiter::EventMask mask) {}
  virtual void EventUnregister(waiter::Waiter* w) {}

  // The inode and the name this file was opened by, for files that have
  // them (fstat-by-inode, fchdir, fchmod, /proc/self/fd); null otherwise.
  virtual std::shared_ptr<Inode> inode() { return nullptr; }
  virtual Location location() { return Location{}; }

  // Signal-driven I/O (file_async.h): the events this file sends SIGIO
  // for while O_ASYNC is on; 0 for files without Linux's f_op->fasync
  // (F_SETFL drops O_ASYNC, FIOASYNC is ENOTTY).
  virtual waiter::EventMask AsyncEvents() { return 0; }
  // The file's O_ASYNC, owner and F_SETSIG state, made at first use.
  FileAsync& async();
  // Null if async() was never called (nothing set).
  FileAsync* async_if_any() const {
    return async_.load(std::memory_order_acquire);
  }

 private:
  std::atomic<FileAsync*> async_{nullptr};
};

// A file description on an inode of the VFS: regular files (data through
// Inode::Read/Write at the description's offset), directories (getdents
// over a snapshot of the entries) and O_PATH descriptors.
class InodeFile : public File {
 public:
  InodeFile(std::shared_ptr<Inode> inode, int flags);
  // Releases the description's OFD and flock locks.
  ~InodeFile() override;
  // `vfs`: the namespace `loc` is in, so that inotify can tell the parent
  // directory about this file's events (may be null).
  void set_location(Location loc, const Vfs* vfs = nullptr) {
    loc_ = std::move(loc);
    vfs_ = vfs;
  }

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Seek(int64_t offset, int whence) override;
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  int64_t GetDents(uint8_t* buf, uint64_t size) override;
  std::shared_ptr<Inode> inode() override { return inode_; }
  Location location() override { return loc_; }

  // A pseudo-filesystem file's state beyond its offset, saved with it and
  // handed to the file opened again at load (procfs's
  // /proc/sandbox/checkpoint: the checkpoint it waits for); "" for none.
  virtual std::string SavedState() { return ""; }
  // 0, or -EINVAL for a state this kind of file does not take.
  virtual int LoadSavedState(const std::string& state) {
    return state.empty() ? 0 : -EINVAL;
  }

 private:
  friend struct ::sandboxd::state::FsState;
  // Read, Write and GetDents under mu_; the inotify hooks run after.
  int64_t ReadLocked(void* buf, uint64_t n, int64_t offset);
  int64_t WriteLocked(const void* buf, uint64_t n, int64_t offset);
  int64_t GetDentsLocked(uint8_t* buf, uint64_t size);

  const std::shared_ptr<Inode> inode_;
  // Set once, before the file is shared.
  Location loc_;
  const Vfs* vfs_ = nullptr;
  absl::Mutex mu_;
  int flags_ ABSL_GUARDED_BY(mu_);
  int64_t offset_ ABSL_GUARDED_BY(mu_) = 0;
  // Directory entries, taken at the first getdents (and again after a
  // rewind), so that offsets stay meaningful while the directory changes.
  std::vector<DirEntry> entries_ ABSL_GUARDED_BY(mu_);
  bool have_entries_ ABSL_GUARDED_BY(mu_) = false;
};

// struct stat from an Attr.
void AttrToStat(const Attr& a, struct stat* st);

// An fd inherited from the host (the sandbox's stdin, stdout, stderr).
// Streams among them can be watched (poll, select, epoll) through the
// Sentry's HostPoller, for as long as some waiter is registered.
class HostFile : public File, public waiter::EventSource {
 public:
  // Takes ownership of `fd` (a dup of the inherited descriptor).
  explicit HostFile(UniqueFd fd);
  ~HostFile() override;

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Seek(int64_t offset, int whence) override;
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  // A zero-timeout host poll of the fd.
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  // Null unless the host fd supports epoll (pipes, sockets, terminals).
  std::shared_ptr<waiter::WaitQueue> event_queue() override;

  int host_fd() const { return fd_.get(); }
  // The descriptor number this file stands for in the Sentry's own
  // inheritance (0, 1, 2 for the sandbox's stdio), so that a restore can
  // ask its caller for the same one; -1 for other host files (devfs's
  // console, procfs), which cannot be saved.
  int inherited_fd() const { return inherited_fd_; }
  void set_inherited_fd(int fd) { inherited_fd_ = fd; }

 private:
  // Waits until the host fd is ready for `events` or the task is
  // interrupted (-EINTR). Applies only to descriptors that block.
  int64_t WaitReady(short events, const IoContext& io);

  UniqueFd fd_;
  int inherited_fd_ = -1;
  // O_NONBLOCK as the sandbox sees it. The host description is shared with
  // whoever started the sandbox, so its flags are never changed.
  std::atomic<bool> nonblock_{false};
  int access_mode_ = 0;
  bool stream_ = false;  // pipe, socket or character device: may block
  // Pipes, sockets and terminals: what the host's epoll accepts (/dev/null
  // and regular files it refuses with EPERM, and they never block).
  bool watchable_ = false;

  const std::shared_ptr<waiter::WaitQueue> queue_ = std::make_shared<waiter::WaitQueue>();
  absl::Mutex watch_mu_;
  // HostPoller handle while some waiter is registered; 0 otherwise.
  uint64_t watch_handle_ ABSL_GUARDED_BY(watch_mu_) = 0;
};

// Size in bytes of an ioctl's argument, for the ioctls files implement;
// -1 for unknown requests (they fail with ENOTTY).
int64_t IoctlArgSize(uint64_t request, bool* copy_in, bool* copy_out);

// The descriptor table of a process.
class FdTable {
 public:
  explicit FdTable(uint64_t max_fds) : max_fds_(max_fds) {}
  ~FdTable();

  // Installs `f` at the lowest free descriptor >= min_fd: the fd or -EMFILE.
  int64_t Install(std::shared_ptr<File> f, bool cloexec, int min_fd = 0);
  // Installs at exactly `fd`, closing what was there: fd or -EBADF/-EMFILE.
  int64_t InstallAt(int fd, std::shared_ptr<File> f, bool cloexec);
  std::shared_ptr<File> Get(int fd) const;
  // The open descriptors, ascending (for /proc/[pid]/fd).
  std::vector<int> Fds() const;
  int64_t Close(int fd);
  int64_t GetCloexec(int fd) const;  // 0/1 or -EBADF
  int64_t SetCloexec(int fd, bool cloexec);
  void set_max_fds(uint64_t n);
  // fork without CLONE_FILES: a copy sharing the open file descriptions.
  std::shared_ptr<FdTable> Fork() const;
  // execve: closes the descriptors marked close-on-exec.
  void CloseOnExec();
  // close_range(2) over [first, last] (last may be past the end): closes
  // them, or with `cloexec_only` marks them close-on-exec. Never fails.
  void CloseRange(uint32_t first, uint32_t last, bool cloexec_only);

 private:
  friend struct ::sandboxd::state::FsState;
  struct Entry {
    std::shared_ptr<File> file;
    bool cloexec = false;
  };
  // A descriptor of `f` was closed: the process's POSIX record locks on
  // its inode go (Linux drops them at any close of the inode).
  void Dropped(const std::shared_ptr<File>& f) ABSL_LOCKS_EXCLUDED(mu_);
  mutable absl::Mutex mu_;
  std::vector<Entry> fds_ ABSL_GUARDED_BY(mu_);
  uint64_t max_fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_FILE_H_
