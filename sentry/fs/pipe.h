// Pipes (pipe(2), man 7 pipe): a byte buffer in the Sentry's heap shared by
// a read end and a write end, which are separate Files.
//
// Semantics kept from Linux: 64 KiB default capacity; writes of at most
// PIPE_BUF (4096) bytes are atomic, longer ones may be split; a read returns
// what is buffered (at least one byte) or waits; EOF once every write end is
// closed; EPIPE once every read end is closed (the syscall layer adds
// SIGPIPE); poll gives POLLIN/POLLHUP on the read end and POLLOUT/POLLERR on
// the write end. Not kept: O_DIRECT packet mode (accepted, ignored), and the
// capacity is counted in bytes, not in 4 KiB slots.
//
// FIFOs (fifo(7)): a named pipe's inode holds a Fifo, which gives every
// opener of that inode the same Pipe while any opener holds it (a new one
// once all have closed, so data left by closed openers is gone, as on
// Linux), with fifo_open's rules: O_RDONLY waits for a writer and O_WRONLY
// for a reader (O_NONBLOCK: at once, and ENXIO for a writer without
// readers), O_RDWR never waits; the waits are interruptible.
//
// Lock order: Fifo::mu_ before Pipe::mu_; Pipe::mu_ is a leaf for
// everything but the pipe's queue, which is notified only after mu_ is
// released.
#ifndef SANDBOXD_SENTRY_FS_PIPE_H_
#define SANDBOXD_SENTRY_FS_PIPE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::fs {

class Pipe {
 public:
  static constexpr uint64_t kDefaultCapacity = 64 * 1024;
  static constexpr uint64_t kPipeBuf = 4096;
  // /proc/sys/fs/pipe-max-size's default: the limit for F_SETPIPE_SZ.
  static constexpr uint64_t kMaxCapacity = 1024 * 1024;

  // A new pipe with no ends; PipeEnd's constructor counts them.
  Pipe();

  // Bytes read (>= 1), 0 at EOF, -EAGAIN, -EINTR.
  int64_t Read(void* buf, uint64_t n, bool nonblock, const IoContext& io);
  // Bytes written, -EPIPE, -EAGAIN, -EINTR (a partial count wins over an
  // error once something was written).
  int64_t Write(const void* buf, uint64_t n, bool nonblock,
                const IoContext& io);

  // For splice and tee, which move data without a reader's buffer of
  // their own:
  // Waits until the pipe holds data (returns the bytes buffered) or has no
  // writer (0); -EAGAIN if `nonblock` and neither holds, -EINTR.
  int64_t WaitReadable(bool nonblock, const IoContext& io);
  // Waits until there is room (returns how much); -EPIPE without readers,
  // -EAGAIN if `nonblock` and the pipe is full, -EINTR.
  int64_t WaitWritable(bool nonblock, const IoContext& io);
  // Copies up to `n` bytes from the front without consuming them.
  uint64_t Peek(void* buf, uint64_t n);
  // Consumes up to `n` bytes from the front (after a Peek) and wakes
  // writers.
  uint64_t Discard(uint64_t n);

  waiter::EventMask ReadReadiness(waiter::EventMask mask);
  waiter::EventMask WriteReadiness(waiter::EventMask mask);
  uint64_t Buffered();

  uint64_t capacity();
  // F_SETPIPE_SZ: rounds up to a power of two pages; -EPERM above
  // kMaxCapacity (Linux without CAP_SYS_RESOURCE, which the sandbox never
  // has), -EBUSY below what is buffered. Returns the new capacity.
  int64_t SetCapacity(uint64_t size);

  void OpenEnd(bool write_end);
  void CloseEnd(bool write_end);

  // Linux's r_counter/w_counter: how many read (write) ends were ever
  // opened. A FIFO's blocking open waits for the other one to change.
  uint64_t OpenedEnds(bool write_end);
  int OpenEnds(bool write_end);

  const std::shared_ptr<waiter::WaitQueue>& queue() const { return queue_; }
  uint64_t ino() const { return ino_; }

 private:
  friend struct ::sandboxd::state::FsState;
  // Appends up to `n` bytes; returns how many fit.
  uint64_t Append(const uint8_t* p, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t Consume(uint8_t* p, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<waiter::WaitQueue> queue_ = std::make_shared<waiter::WaitQueue>();
  const uint64_t ino_;

  absl::Mutex mu_;
  // Data as a ring of chunks of at most kChunk bytes; the first chunk's
  // first front_off_ bytes were read already.
  std::deque<std::vector<uint8_t>> chunks_ ABSL_GUARDED_BY(mu_);
  uint64_t front_off_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t capacity_ ABSL_GUARDED_BY(mu_) = kDefaultCapacity;
  int readers_ ABSL_GUARDED_BY(mu_) = 0;
  int writers_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t readers_opened_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writers_opened_ ABSL_GUARDED_BY(mu_) = 0;
};

// One end of a pipe: an open file description. Its destructor (the last
// descriptor closed) closes the end and wakes the other side.
class PipeEnd : public File, public waiter::EventSource {
 public:
  // `flags`: O_NONBLOCK, O_DIRECT (kept for F_GETFL only). `fifo`: the
  // FIFO's inode this end was opened through (fstat shows it), or null.
  PipeEnd(std::shared_ptr<Pipe> pipe, bool write_end, int flags,
          std::shared_ptr<Inode> fifo = nullptr);
  ~PipeEnd() override;

  // pipe2(2): the read end and the write end of a new pipe.
  static std::pair<std::shared_ptr<PipeEnd>, std::shared_ptr<PipeEnd>> Create(
      int flags);

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return pipe_->queue(); }
  // Linux's pipe_fasync: readers get POLL_IN when data comes or the last
  // writer goes, writers POLL_OUT when room comes or the last reader goes.
  waiter::EventMask AsyncEvents() override {
    return write_end_ ? (POLLOUT | POLLWRNORM | POLLERR)
                      : (POLLIN | POLLRDNORM | POLLHUP);
  }

  Pipe& pipe() { return *pipe_; }
  const std::shared_ptr<Pipe>& pipe_ptr() const { return pipe_; }
  bool write_end() const { return write_end_; }
  const std::shared_ptr<Inode>& fifo() const { return fifo_; }

  // A FIFO's name (Linux's f_path): /proc/PID/fd's link, the fd calls
  // that act on the inode (fchmod, fstatat AT_EMPTY_PATH), and inotify:
  // reads and writes tell the FIFO's own watches (IN_ACCESS, IN_MODIFY),
  // the close tells its directory's too (IN_CLOSE_*), as Linux 6.18 does.
  // `vfs`: the namespace `loc` is in (null: no directory is told). Set
  // once, before the file is shared; pipe(2)'s ends have none.
  void set_location(Location loc, const Vfs* vfs) {
    loc_ = std::move(loc);
    vfs_ = vfs;
  }
  Location location() override { return loc_; }

  // A FIFO's read end opened O_NONBLOCK without writers: no POLLHUP until
  // a writer has opened after `writers_opened` (Linux's f_version).
  void SuppressHupUntilWriter(uint64_t writers_opened) {
    hup_after_.store(writers_opened);
  }
  // Whether that holds still: no writer has opened since.
  bool NoWriterYet() {
    const uint64_t after = hup_after_.load();
    return after != kHupAlways && pipe_->OpenedEnds(true) == after;
  }

 private:
  static constexpr uint64_t kHupAlways = ~uint64_t{0};

  const std::shared_ptr<Pipe> pipe_;
  const bool write_end_;
  std::atomic<int> flags_;  // O_NONBLOCK | O_DIRECT
  const std::shared_ptr<Inode> fifo_;
  std::atomic<uint64_t> hup_after_{kHupAlways};
  Location loc_;             // set once, before the file is shared
  const Vfs* vfs_ = nullptr;
};

// A pipe opened for reading and writing at once (a FIFO's O_RDWR, a pipe
// reopened O_RDWR through /proc/PID/fd): one description that is both a
// reader and a writer, so it never sees EOF or EPIPE from itself.
class PipeReadWrite final : public File, public waiter::EventSource {
 public:
  // `flags`: O_NONBLOCK, O_DIRECT, as PipeEnd's; `fifo` as PipeEnd's.
  PipeReadWrite(const std::shared_ptr<Pipe>& pipe, int flags,
                std::shared_ptr<Inode> fifo = nullptr);
  ~PipeReadWrite() override;

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  // Both ends notify the pipe's one queue: register once.
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  std::shared_ptr<waiter::WaitQueue> event_queue() override;
  // On both of Linux's fasync lists.
  waiter::EventMask AsyncEvents() override {
    return POLLIN | POLLRDNORM | POLLHUP | POLLOUT | POLLWRNORM;
  }

  const std::shared_ptr<Pipe>& pipe_ptr() const { return read_->pipe_ptr(); }
  const std::shared_ptr<Inode>& fifo() const { return read_->fifo(); }
  // The ends, for the checkpoint.
  const std::shared_ptr<PipeEnd>& read_end() const { return read_; }
  // As PipeEnd's (the ends inside have no name of their own: one
  // description, one close event).
  void set_location(Location loc, const Vfs* vfs) {
    loc_ = std::move(loc);
    vfs_ = vfs;
  }
  Location location() override { return loc_; }

 private:
  const std::shared_ptr<PipeEnd> read_;
  const std::shared_ptr<PipeEnd> write_;
  Location loc_;             // set once, before the file is shared
  const Vfs* vfs_ = nullptr;
};

// Names a FIFO's description (a PipeEnd or PipeReadWrite that Fifo::Open
// made) by the location it was opened through; other files are left as
// they are.
void SetFifoLocation(File& f, Location loc, const Vfs* vfs);

// The PipeEnd whose pipe() a file is a description of (a PipeReadWrite's
// read end), or null: for fcntl's pipe sizes and splice, which need the
// pipe rather than the end.
PipeEnd* AsPipeEnd(File& f);

// The pipe of one FIFO inode (a tmpfs or hostfs node of type S_IFIFO).
class Fifo {
 public:
  // fifo_open: a PipeEnd or PipeReadWrite of the inode's pipe in *out.
  // Blocking opens wait through io.blocker. Returns 0, -ENXIO (O_WRONLY |
  // O_NONBLOCK without readers), -EINTR (the syscall layer restarts it
  // under SA_RESTART), -EINVAL (access mode 3).
  int Open(int flags, const IoContext& io, std::shared_ptr<Inode> inode,
           std::shared_ptr<File>* out);
  // Whether any opener holds the pipe now (checkpoint refuses that).
  bool InUse();

 private:
  friend struct ::sandboxd::state::FsState;
  absl::Mutex mu_;
  std::weak_ptr<Pipe> pipe_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_PIPE_H_
