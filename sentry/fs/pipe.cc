#include "sentry/fs/pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cstring>

#include "sentry/fs/anon.h"
#include "sentry/fs/inotify.h"

namespace sandboxd::fs {
namespace {

// Chunks are allocated at this size so that many small writes share one.
constexpr uint64_t kChunk = 4096;

constexpr waiter::EventMask kIn = POLLIN | POLLRDNORM;
constexpr waiter::EventMask kOut = POLLOUT | POLLWRNORM;

}  // namespace

Pipe::Pipe() : ino_(NextAnonIno()) {}

uint64_t Pipe::Append(const uint8_t* p, uint64_t n) {
  n = std::min(n, capacity_ - std::min(capacity_, size_));
  uint64_t done = 0;
  while (done < n) {
    if (chunks_.empty() || chunks_.back().size() == kChunk) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunk);
    }
    std::vector<uint8_t>& c = chunks_.back();
    uint64_t k = std::min(n - done, kChunk - c.size());
    c.insert(c.end(), p + done, p + done + k);
    done += k;
  }
  size_ += n;
  return n;
}

uint64_t Pipe::Consume(uint8_t* p, uint64_t n) {
  n = std::min(n, size_);
  uint64_t done = 0;
  while (done < n) {
    std::vector<uint8_t>& c = chunks_.front();
    uint64_t k = std::min(n - done, c.size() - front_off_);
    std::memcpy(p + done, c.data() + front_off_, k);
    done += k;
    front_off_ += k;
    if (front_off_ == c.size()) {
      chunks_.pop_front();
      front_off_ = 0;
    }
  }
  size_ -= n;
  return n;
}

int64_t Pipe::Read(void* buf, uint64_t n, bool nonblock, const IoContext& io) {
  if (n == 0) return 0;
  for (;;) {
    {
      absl::ReleasableMutexLock l(&mu_);
      if (size_ > 0) {
        uint64_t got = Consume(static_cast<uint8_t*>(buf), n);
        l.Release();
        queue_->Notify(kOut);
        return static_cast<int64_t>(got);
      }
      if (writers_ == 0) return 0;
    }
    if (nonblock || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*queue_, kIn, [this] {
      absl::MutexLock l(&mu_);
      return size_ > 0 || writers_ == 0;
    });
    if (r < 0) return r;
  }
}

int64_t Pipe::Write(const void* buf, uint64_t n, bool nonblock,
                    const IoContext& io) {
  if (n == 0) return 0;  // Linux: a null write succeeds, readers or not
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  // A write of at most PIPE_BUF goes in whole or not at all; a longer one
  // takes whatever room there is.
  const bool atomic = n <= kPipeBuf;
  uint64_t done = 0;
  for (;;) {
    uint64_t need;
    {
      absl::ReleasableMutexLock l(&mu_);
      if (readers_ == 0) return done > 0 ? static_cast<int64_t>(done) : -EPIPE;
      uint64_t room = capacity_ - std::min(capacity_, size_);
      if (room >= (atomic ? n : 1)) {
        done += Append(p + done, n - done);
        l.Release();
        queue_->Notify(kIn);
        if (done == n) return static_cast<int64_t>(n);
      }
      need = atomic ? n : 1;
    }
    if (nonblock || io.blocker == nullptr) {
      return done > 0 ? static_cast<int64_t>(done) : -EAGAIN;
    }
    // Part of the write is in the pipe: a stop ends the wait with a short
    // write, never a second copy of that part.
    if (done > 0) io.blocker->MarkProgress();
    int r = io.blocker->Wait(*queue_, kOut, [this, need] {
      absl::MutexLock l(&mu_);
      return readers_ == 0 || capacity_ - std::min(capacity_, size_) >= need;
    });
    if (r < 0) return done > 0 ? static_cast<int64_t>(done) : r;
  }
}

int64_t Pipe::WaitReadable(bool nonblock, const IoContext& io) {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (size_ > 0) return static_cast<int64_t>(size_);
      if (writers_ == 0) return 0;
    }
    if (nonblock || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*queue_, kIn, [this] {
      absl::MutexLock l(&mu_);
      return size_ > 0 || writers_ == 0;
    });
    if (r < 0) return r;
  }
}

int64_t Pipe::WaitWritable(bool nonblock, const IoContext& io) {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (readers_ == 0) return -EPIPE;
      uint64_t room = capacity_ - std::min(capacity_, size_);
      if (room > 0) return static_cast<int64_t>(room);
    }
    if (nonblock || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*queue_, kOut, [this] {
      absl::MutexLock l(&mu_);
      return readers_ == 0 || size_ < capacity_;
    });
    if (r < 0) return r;
  }
}

uint64_t Pipe::Peek(void* buf, uint64_t n) {
  absl::MutexLock l(&mu_);
  n = std::min(n, size_);
  uint8_t* p = static_cast<uint8_t*>(buf);
  uint64_t done = 0;
  uint64_t off = front_off_;
  for (auto it = chunks_.begin(); done < n && it != chunks_.end(); ++it) {
    uint64_t k = std::min(n - done, it->size() - off);
    std::memcpy(p + done, it->data() + off, k);
    done += k;
    off = 0;
  }
  return done;
}

uint64_t Pipe::Discard(uint64_t want) {
  uint64_t n;
  {
    absl::MutexLock l(&mu_);
    want = std::min(want, size_);
    n = want;
    while (n > 0) {
      std::vector<uint8_t>& c = chunks_.front();
      uint64_t k = std::min(n, c.size() - front_off_);
      front_off_ += k;
      size_ -= k;
      n -= k;
      if (front_off_ == c.size()) {
        chunks_.pop_front();
        front_off_ = 0;
      }
    }
  }
  queue_->Notify(kOut);
  return want;
}

waiter::EventMask Pipe::ReadReadiness(waiter::EventMask mask) {
  absl::MutexLock l(&mu_);
  waiter::EventMask m = 0;
  if (size_ > 0) m |= kIn;
  if (writers_ == 0) m |= POLLHUP;
  return m & (mask | POLLHUP | POLLERR);
}

waiter::EventMask Pipe::WriteReadiness(waiter::EventMask mask) {
  absl::MutexLock l(&mu_);
  waiter::EventMask m = 0;
  // Linux reports POLLOUT while a 4 KiB slot is free; with byte counting,
  // while a PIPE_BUF write would go through at once.
  if (capacity_ - std::min(capacity_, size_) >= kPipeBuf) m |= kOut;
  if (readers_ == 0) m |= POLLERR;
  return m & (mask | POLLHUP | POLLERR);
}

uint64_t Pipe::Buffered() {
  absl::MutexLock l(&mu_);
  return size_;
}

uint64_t Pipe::capacity() {
  absl::MutexLock l(&mu_);
  return capacity_;
}

int64_t Pipe::SetCapacity(uint64_t size) {
  if (size > kMaxCapacity) return -EPERM;
  uint64_t c = kPipeBuf;
  while (c < size) c <<= 1;
  {
    absl::MutexLock l(&mu_);
    if (c < size_) return -EBUSY;
    capacity_ = c;
  }
  queue_->Notify(kOut);  // a larger pipe may have room now
  return static_cast<int64_t>(c);
}

void Pipe::OpenEnd(bool write_end) {
  {
    absl::MutexLock l(&mu_);
    (write_end ? writers_ : readers_)++;
    (write_end ? writers_opened_ : readers_opened_)++;
  }
  // A FIFO's opener waiting for its partner; pollers whose POLLHUP or
  // POLLERR ends. (A new pipe has no waiters: nothing to wake.)
  queue_->Notify(kIn | kOut);
}

uint64_t Pipe::OpenedEnds(bool write_end) {
  absl::MutexLock l(&mu_);
  return write_end ? writers_opened_ : readers_opened_;
}

int Pipe::OpenEnds(bool write_end) {
  absl::MutexLock l(&mu_);
  return write_end ? writers_ : readers_;
}

void Pipe::CloseEnd(bool write_end) {
  {
    absl::MutexLock l(&mu_);
    (write_end ? writers_ : readers_)--;
  }
  // The last writer gone means EOF for readers (POLLHUP); the last reader
  // gone means EPIPE for writers (POLLERR). Waking both sides on any close
  // is simpler and harmless: waiters recheck.
  queue_->Notify(write_end ? (POLLHUP | kIn) : (POLLERR | kOut));
}

// ---------------------------------------------------------------------------
// PipeEnd

PipeEnd::PipeEnd(std::shared_ptr<Pipe> pipe, bool write_end, int flags,
                 std::shared_ptr<Inode> fifo)
    : pipe_(std::move(pipe)),
      write_end_(write_end),
      flags_(flags & (O_NONBLOCK | O_DIRECT)),
      fifo_(std::move(fifo)) {
  pipe_->OpenEnd(write_end_);
}

PipeEnd::~PipeEnd() {
  // Linux's __fput: the close event before the release.
  if (loc_.valid() && inotify::Active()) {
    inotify::NotifyFile(vfs_, loc_, write_end_ ? IN_CLOSE_WRITE : IN_CLOSE_NOWRITE);
  }
  pipe_->CloseEnd(write_end_);
}

std::pair<std::shared_ptr<PipeEnd>, std::shared_ptr<PipeEnd>> PipeEnd::Create(
    int flags) {
  auto p = std::make_shared<Pipe>();
  return {std::make_shared<PipeEnd>(p, false, flags),
          std::make_shared<PipeEnd>(p, true, flags)};
}

int64_t PipeEnd::Read(void* buf, uint64_t n, int64_t offset,
                      const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  if (write_end_) return -EBADF;
  int64_t r = pipe_->Read(buf, n, (flags_.load() & O_NONBLOCK) != 0, io);
  // The FIFO's own watches only: Linux tells no directory of a FIFO's
  // reads and writes.
  if (r > 0 && loc_.valid() && inotify::Active()) inotify::NotifyFile(nullptr, loc_, IN_ACCESS);
  return r;
}

int64_t PipeEnd::Write(const void* buf, uint64_t n, int64_t offset,
                       const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  if (!write_end_) return -EBADF;
  int64_t r = pipe_->Write(buf, n, (flags_.load() & O_NONBLOCK) != 0, io);
  if (r > 0 && loc_.valid() && inotify::Active()) inotify::NotifyFile(nullptr, loc_, IN_MODIFY);
  return r;
}

int64_t PipeEnd::Stat(struct stat* st) {
  if (fifo_ != nullptr) {
    // fstat of an opened FIFO describes the FIFO's inode.
    Attr a;
    if (int r = fifo_->GetAttr(&a); r < 0) return r;
    AttrToStat(a, st);
    return 0;
  }
  AnonStat(st, S_IFIFO | 0600, pipe_->ino());
  return 0;
}

int64_t PipeEnd::Ioctl(uint64_t request, void* buf) {
  if (request == FIONREAD) {
    uint64_t n = pipe_->Buffered();
    *static_cast<int*>(buf) = static_cast<int>(std::min<uint64_t>(n, INT32_MAX));
    return 0;
  }
  return -ENOTTY;
}

int PipeEnd::StatusFlags() const {
  return (write_end_ ? O_WRONLY : O_RDONLY) | flags_.load();
}

int64_t PipeEnd::SetStatusFlags(int flags) {
  // F_SETFL changes O_NONBLOCK here; O_APPEND, O_ASYNC and O_NOATIME mean
  // nothing for pipes. O_DIRECT (packet mode) is kept for F_GETFL only.
  flags_.store(flags & (O_NONBLOCK | O_DIRECT));
  return 0;
}

waiter::EventMask PipeEnd::Readiness(waiter::EventMask mask) {
  if (write_end_) return pipe_->WriteReadiness(mask);
  waiter::EventMask m = pipe_->ReadReadiness(mask);
  if ((m & POLLHUP) != 0 && NoWriterYet()) m &= ~POLLHUP;
  return m;
}

void PipeEnd::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  pipe_->queue()->Add(w, mask);
}

void PipeEnd::EventUnregister(waiter::Waiter* w) { pipe_->queue()->Remove(w); }

// ---------------------------------------------------------------------------
// PipeReadWrite

PipeReadWrite::PipeReadWrite(const std::shared_ptr<Pipe>& pipe, int flags,
                             std::shared_ptr<Inode> fifo)
    : read_(std::make_shared<PipeEnd>(pipe, false, flags, fifo)),
      write_(std::make_shared<PipeEnd>(pipe, true, flags, std::move(fifo))) {}

PipeReadWrite::~PipeReadWrite() {
  if (loc_.valid() && inotify::Active()) inotify::NotifyFile(vfs_, loc_, IN_CLOSE_WRITE);
}

int64_t PipeReadWrite::Read(void* buf, uint64_t n, int64_t offset,
                            const IoContext& io) {
  int64_t r = read_->Read(buf, n, offset, io);
  if (r > 0 && loc_.valid() && inotify::Active()) inotify::NotifyFile(nullptr, loc_, IN_ACCESS);
  return r;
}

int64_t PipeReadWrite::Write(const void* buf, uint64_t n, int64_t offset,
                             const IoContext& io) {
  int64_t r = write_->Write(buf, n, offset, io);
  if (r > 0 && loc_.valid() && inotify::Active()) inotify::NotifyFile(nullptr, loc_, IN_MODIFY);
  return r;
}

void SetFifoLocation(File& f, Location loc, const Vfs* vfs) {
  if (auto* e = dynamic_cast<PipeEnd*>(&f)) {
    e->set_location(std::move(loc), vfs);
  } else if (auto* rw = dynamic_cast<PipeReadWrite*>(&f)) {
    rw->set_location(std::move(loc), vfs);
  }
}

int64_t PipeReadWrite::Stat(struct stat* st) { return read_->Stat(st); }

int64_t PipeReadWrite::Ioctl(uint64_t request, void* buf) {
  return read_->Ioctl(request, buf);
}

int PipeReadWrite::StatusFlags() const {
  return (read_->StatusFlags() & ~O_ACCMODE) | O_RDWR;
}

int64_t PipeReadWrite::SetStatusFlags(int flags) {
  int64_t r = read_->SetStatusFlags(flags);
  return r < 0 ? r : write_->SetStatusFlags(flags);
}

waiter::EventMask PipeReadWrite::Readiness(waiter::EventMask mask) {
  return read_->Readiness(mask) | write_->Readiness(mask);
}

void PipeReadWrite::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  read_->EventRegister(w, mask);
}

void PipeReadWrite::EventUnregister(waiter::Waiter* w) {
  read_->EventUnregister(w);
}

std::shared_ptr<waiter::WaitQueue> PipeReadWrite::event_queue() {
  return read_->event_queue();
}

PipeEnd* AsPipeEnd(File& f) {
  if (auto* end = dynamic_cast<PipeEnd*>(&f)) return end;
  if (auto* rw = dynamic_cast<PipeReadWrite*>(&f)) return rw->read_end().get();
  return nullptr;
}

// ---------------------------------------------------------------------------
// Fifo

int Fifo::Open(int flags, const IoContext& io, std::shared_ptr<Inode> inode,
               std::shared_ptr<File>* out) {
  const int acc = flags & O_ACCMODE;
  if (acc != O_RDONLY && acc != O_WRONLY && acc != O_RDWR) return -EINVAL;
  const bool nonblock = (flags & O_NONBLOCK) != 0 || io.blocker == nullptr;
  const int keep = flags & (O_NONBLOCK | O_DIRECT);
  std::shared_ptr<Pipe> p;
  std::shared_ptr<PipeEnd> end;
  uint64_t partner_opened = 0;
  bool wait = false;
  {
    // Held while the end is made, so that the ENXIO check and the new
    // writer are one step against other openers, as under Linux's pipe
    // lock.
    absl::MutexLock l(&mu_);
    p = pipe_.lock();
    if (p == nullptr) {
      p = std::make_shared<Pipe>();
      pipe_ = p;
    }
    if (acc == O_RDWR) {
      *out = std::make_shared<PipeReadWrite>(p, keep, std::move(inode));
      return 0;
    }
    const bool write_end = acc == O_WRONLY;
    if (write_end && (flags & O_NONBLOCK) && p->OpenEnds(false) == 0) {
      return -ENXIO;
    }
    end = std::make_shared<PipeEnd>(p, write_end, keep, std::move(inode));
    partner_opened = p->OpenedEnds(!write_end);
    if (p->OpenEnds(!write_end) == 0) {
      if (!write_end && nonblock) {
        end->SuppressHupUntilWriter(partner_opened);
      } else {
        wait = true;
      }
    }
  }
  if (wait) {
    if (io.blocker == nullptr) return -ENXIO;
    const bool write_end = end->write_end();
    // Waits for a partner to open, even if it closed again since (Linux's
    // wait_for_partner watches the counter, not the count). On -EINTR
    // `end` goes away and closes this side again.
    int r = io.blocker->Wait(*p->queue(), kIn | kOut, [&] {
      return p->OpenedEnds(!write_end) != partner_opened;
    });
    if (r < 0) return r;
  }
  *out = std::move(end);
  return 0;
}

bool Fifo::InUse() {
  absl::MutexLock l(&mu_);
  return !pipe_.expired();
}

}  // namespace sandboxd::fs
