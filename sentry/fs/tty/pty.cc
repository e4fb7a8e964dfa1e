#include "sentry/fs/tty/pty.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/sysmacros.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/time/clock.h"

namespace sandboxd::fs::tty {
namespace {

constexpr waiter::EventMask kIn = POLLIN | POLLRDNORM;
constexpr waiter::EventMask kOut = POLLOUT | POLLWRNORM;

timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

}  // namespace

// ---------------------------------------------------------------------------
// Pty

Pty::Pty(std::shared_ptr<DevPts> devpts, uint32_t index, JobControl* jc)
    : Terminal(jc), devpts_(std::move(devpts)), index_(index) {}

Pty::~Pty() { devpts_->FreeIndex(index_); }

int64_t Pty::TakeMasterOutput(uint8_t* buf, uint64_t n) {
  if (!packet_) {
    uint64_t k = std::min<uint64_t>(n, output_.size());
    std::memcpy(buf, output_.data(), k);
    output_.erase(0, k);
    return static_cast<int64_t>(k);
  }
  // Packet mode: a status byte alone, or TIOCPKT_DATA then data.
  if (packet_status_ != 0) {
    buf[0] = packet_status_;
    packet_status_ = 0;
    return 1;
  }
  buf[0] = TIOCPKT_DATA;
  uint64_t k = std::min<uint64_t>(n - 1, output_.size());
  std::memcpy(buf + 1, output_.data(), k);
  output_.erase(0, k);
  return static_cast<int64_t>(k + 1);
}

int64_t Pty::MasterRead(void* buf, uint64_t n, bool nonblock,
                        const IoContext& io) {
  if (n == 0) return 0;
  for (;;) {
    {
      absl::ReleasableMutexLock l(&mu_);
      if (!output_.empty() || (packet_ && packet_status_ != 0)) {
        int64_t r = TakeMasterOutput(static_cast<uint8_t*>(buf), n);
        l.Release();
        replica_q_->Notify(kOut);
        return r;
      }
      if (replica_seen_ && replicas_ == 0) return -EIO;
    }
    if (nonblock || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*master_q_, kIn, [this] {
      absl::MutexLock l(&mu_);
      return !output_.empty() || (packet_ && packet_status_ != 0) ||
             (replica_seen_ && replicas_ == 0);
    });
    if (r < 0) return r;
  }
}

int64_t Pty::MasterWrite(const void* buf, uint64_t n, bool nonblock,
                         const IoContext& io) {
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  uint64_t done = 0;
  for (;;) {
    std::string echo;
    std::vector<int> signals;
    {
      // Input is taken whether or not a replica is open (it waits for
      // the next opener), as Linux does.
      absl::MutexLock l(&mu_);
      done += ld_.Input(p + done, n - done, &echo, &signals);
      output_ += echo;
    }
    replica_q_->Notify(kIn);
    if (!echo.empty()) master_q_->Notify(kIn);
    if (!signals.empty()) {
      pid_t fg = foreground();
      for (int s : signals) {
        if (fg > 0) job_control()->SignalProcessGroup(fg, s);
      }
    }
    if (done == n) return static_cast<int64_t>(n);
    // The replica's input is full: wait for its reader.
    if (nonblock || io.blocker == nullptr) {
      return done > 0 ? static_cast<int64_t>(done) : -EAGAIN;
    }
    if (done > 0) io.blocker->MarkProgress();  // a stop: a short write
    int r = io.blocker->Wait(*master_q_, kOut, [this] {
      absl::MutexLock l(&mu_);
      return ld_.HasRoom();
    });
    if (r < 0) return done > 0 ? static_cast<int64_t>(done) : r;
  }
}

waiter::EventMask Pty::MasterReadiness(waiter::EventMask mask) {
  absl::MutexLock l(&mu_);
  waiter::EventMask m = 0;
  if (!output_.empty() || (packet_ && packet_status_ != 0)) m |= kIn;
  if (ld_.HasRoom()) m |= kOut;
  if (replica_seen_ && replicas_ == 0) m |= POLLHUP;
  if (packet_ && packet_status_ != 0) m |= POLLPRI;
  return m & (mask | POLLHUP | POLLERR);
}

void Pty::MasterClosed() {
  {
    absl::MutexLock l(&mu_);
    master_open_ = false;
    ld_.FlushInput();
  }
  devpts_->RemoveNode(index_);
  // The hangup: readers and writers of the replica wake up to EOF and EIO.
  replica_q_->Notify(kIn | kOut | POLLHUP | POLLERR);
  pid_t sid = session();
  if (sid > 0) job_control()->HangUp(shared_from_this(), sid);
  SetSession(0, 0);
}

bool Pty::hung_up() const {
  absl::MutexLock l(&mu_);
  return !master_open_;
}

int64_t Pty::SetLocked(bool locked) {
  absl::MutexLock l(&mu_);
  locked_ = locked;
  return 0;
}

bool Pty::locked() {
  absl::MutexLock l(&mu_);
  return locked_;
}

int64_t Pty::SetPacketMode(bool on) {
  absl::MutexLock l(&mu_);
  if (on && !packet_) packet_status_ = 0;
  packet_ = on;
  return 0;
}

bool Pty::packet_mode() {
  absl::MutexLock l(&mu_);
  return packet_;
}

int64_t Pty::ReplicaOpening() {
  absl::MutexLock l(&mu_);
  if (!master_open_ || locked_) return -EIO;
  replicas_++;
  replica_seen_ = true;
  return 0;
}

void Pty::ReplicaClosed() {
  {
    absl::MutexLock l(&mu_);
    replicas_--;
  }
  master_q_->Notify(kIn | POLLHUP);
}

int64_t Pty::ReplicaRead(void* buf, uint64_t n, bool nonblock,
                         const IoContext& io) {
  int64_t r = job_control()->CheckAccess(*this, io, SIGTTIN, false);
  if (r < 0) return r;
  uint8_t* out = static_cast<uint8_t*>(buf);
  auto readable = [this]() {
    absl::MutexLock l(&mu_);
    return !master_open_ || ld_.Readable();
  };
  // VMIN/VTIME of non-canonical mode, as n_tty_read reads them.
  uint8_t vmin = 1, vtime = 0;
  bool canonical;
  {
    absl::MutexLock l(&mu_);
    canonical = (ld_.termios().c_lflag & ICANON) != 0;
    if (!canonical) {
      vmin = ld_.termios().c_cc[VMIN];
      vtime = ld_.termios().c_cc[VTIME];
    }
  }
  if (n == 0) return 0;
  const absl::Duration interval = absl::Milliseconds(100) * vtime;
  // No MIN and no TIME: return at once, even empty-handed.
  if (!canonical && vmin == 0 && vtime == 0) {
    absl::MutexLock l(&mu_);
    if (!master_open_ || !ld_.Readable()) return 0;
    uint64_t k = ld_.Read(out, n);
    return static_cast<int64_t>(k);
  }
  // Wait for the first byte (or line): forever, or TIME when MIN is 0.
  for (;;) {
    if (readable()) break;
    if (nonblock || io.blocker == nullptr) return -EAGAIN;
    absl::Time deadline = (!canonical && vmin == 0)
                              ? absl::Now() + interval
                              : absl::InfiniteFuture();
    int w = io.blocker->Wait(*replica_q_, kIn, readable, deadline);
    if (w == -ETIMEDOUT) return 0;
    if (w < 0) return w;
  }
  uint64_t done = 0;
  for (;;) {
    uint64_t got = 0;
    bool eof_or_line_done = false;
    {
      absl::MutexLock l(&mu_);
      if (!master_open_) return static_cast<int64_t>(done);
      if (ld_.Readable()) got = ld_.Read(out + done, n - done);
      eof_or_line_done = (ld_.termios().c_lflag & ICANON) != 0;
    }
    if (got > 0) master_q_->Notify(kOut);  // room for the master's writes
    done += got;
    if (eof_or_line_done || done >= n || done >= vmin) break;
    // MIN not reached: wait for more, at most TIME between bytes.
    if (nonblock || io.blocker == nullptr) break;
    absl::Time deadline =
        vtime > 0 ? absl::Now() + interval : absl::InfiniteFuture();
    if (done > 0) io.blocker->MarkProgress();  // a stop: a short read
    int w = io.blocker->Wait(*replica_q_, kIn, readable, deadline);
    if (w == -ETIMEDOUT) break;
    if (w < 0) break;  // a signal: what was read is returned
  }
  return static_cast<int64_t>(done);
}

int64_t Pty::ReplicaWrite(const void* buf, uint64_t n, bool nonblock,
                          const IoContext& io) {
  {
    KernelTermios t;
    GetTermios(&t);
    if (t.c_lflag & TOSTOP) {
      int64_t r = job_control()->CheckAccess(*this, io, SIGTTOU, true);
      if (r < 0) return r;
    }
  }
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  uint64_t done = 0;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (!master_open_) return done > 0 ? static_cast<int64_t>(done) : -EIO;
      // Whole bytes at a time, each with its output processing.
      while (done < n && output_.size() < kOutputCapacity) {
        uint64_t k = std::min<uint64_t>(n - done, kOutputCapacity - output_.size());
        ld_.Output(p + done, k, &output_);
        done += k;
      }
    }
    master_q_->Notify(kIn);
    if (done == n) return static_cast<int64_t>(n);
    if (nonblock || io.blocker == nullptr) {
      return done > 0 ? static_cast<int64_t>(done) : -EAGAIN;
    }
    if (done > 0) io.blocker->MarkProgress();  // a stop: a short write
    int r = io.blocker->Wait(*replica_q_, kOut, [this] {
      absl::MutexLock l(&mu_);
      return !master_open_ || output_.size() < kOutputCapacity;
    });
    if (r < 0) return done > 0 ? static_cast<int64_t>(done) : r;
  }
}

waiter::EventMask Pty::ReplicaReadiness(waiter::EventMask mask) {
  absl::MutexLock l(&mu_);
  waiter::EventMask m = 0;
  if (!master_open_) {
    // hung_up_tty_poll.
    m = kIn | kOut | POLLHUP | POLLERR;
  } else {
    if (ld_.Readable()) m |= kIn;
    if (output_.size() < kOutputCapacity) m |= kOut;
  }
  return m & (mask | POLLHUP | POLLERR);
}

int64_t Pty::GetTermios(KernelTermios* out) {
  absl::MutexLock l(&mu_);
  *out = ld_.termios();
  return 0;
}

int64_t Pty::SetTermios(const KernelTermios& t, bool flush_input) {
  {
    absl::MutexLock l(&mu_);
    if (flush_input) ld_.FlushInput();
    ld_.SetTermios(t);
  }
  // Leaving canonical mode can make input readable; more room for the
  // master, too.
  replica_q_->Notify(kIn);
  master_q_->Notify(kOut);
  return 0;
}

int64_t Pty::GetWinsize(struct winsize* out) {
  absl::MutexLock l(&mu_);
  *out = winsize_;
  return 0;
}

int64_t Pty::SetWinsize(const struct winsize& ws) {
  {
    absl::MutexLock l(&mu_);
    if (std::memcmp(&ws, &winsize_, sizeof(ws)) == 0) return 0;
    winsize_ = ws;
  }
  NotifyResize();
  return 0;
}

int64_t Pty::InputQueued(int* out) {
  absl::MutexLock l(&mu_);
  *out = static_cast<int>(ld_.Available());
  return 0;
}

// What the replica writes is the master's to read at once: nothing waits in
// an output queue (Linux's pty has no chars_in_buffer either).
int64_t Pty::OutputQueued(int* out) {
  *out = 0;
  return 0;
}

int64_t Pty::MasterQueued(int* out) {
  absl::MutexLock l(&mu_);
  *out = static_cast<int>(output_.size());
  return 0;
}

int64_t Pty::Flush(int queue) {
  if (queue != TCIFLUSH && queue != TCOFLUSH && queue != TCIOFLUSH) {
    return -EINVAL;
  }
  {
    absl::MutexLock l(&mu_);
    if (queue != TCOFLUSH) ld_.FlushInput();
    if (queue != TCIFLUSH) output_.clear();
    if (packet_) {
      if (queue != TCOFLUSH) packet_status_ |= TIOCPKT_FLUSHREAD;
      if (queue != TCIFLUSH) packet_status_ |= TIOCPKT_FLUSHWRITE;
    }
  }
  replica_q_->Notify(kOut);
  master_q_->Notify(kIn | kOut | POLLPRI);
  return 0;
}

int64_t Pty::OpenProgramSide(int flags, std::shared_ptr<Inode> via,
                             std::shared_ptr<File>* out) {
  std::shared_ptr<PtsInode> inode = pts_inode();
  if (inode == nullptr) return -EIO;
  if (via == nullptr) return inode->Open(flags, out);
  int64_t r = ReplicaOpening();
  if (r < 0) return r;
  *out = std::make_shared<PtyReplicaFile>(
      std::move(via), flags, std::static_pointer_cast<Pty>(shared_from_this()));
  return 0;
}

std::shared_ptr<PtsInode> Pty::pts_inode() {
  std::shared_ptr<Inode> in;
  if (devpts_->Lookup(std::to_string(index_), &in) < 0) return nullptr;
  return std::static_pointer_cast<PtsInode>(in);
}

// ---------------------------------------------------------------------------
// Files

PtyMasterFile::PtyMasterFile(std::shared_ptr<Inode> ptmx, int flags,
                             std::shared_ptr<Pty> pty)
    : InodeFile(std::move(ptmx), flags), pty_(std::move(pty)), term_(pty_) {}

PtyMasterFile::~PtyMasterFile() { pty_->MasterClosed(); }

int64_t PtyMasterFile::Read(void* buf, uint64_t n, int64_t offset,
                            const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  return pty_->MasterRead(buf, n, (StatusFlags() & O_NONBLOCK) != 0, io);
}

int64_t PtyMasterFile::Write(const void* buf, uint64_t n, int64_t offset,
                             const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  return pty_->MasterWrite(buf, n, (StatusFlags() & O_NONBLOCK) != 0, io);
}

waiter::EventMask PtyMasterFile::Readiness(waiter::EventMask mask) {
  return pty_->MasterReadiness(mask);
}

void PtyMasterFile::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  pty_->master_queue()->Add(w, mask);
}

void PtyMasterFile::EventUnregister(waiter::Waiter* w) {
  pty_->master_queue()->Remove(w);
}

PtyReplicaFile::PtyReplicaFile(std::shared_ptr<Inode> inode, int flags,
                               std::shared_ptr<Pty> pty)
    : InodeFile(std::move(inode), flags), pty_(std::move(pty)), term_(pty_) {}

PtyReplicaFile::~PtyReplicaFile() { pty_->ReplicaClosed(); }

int64_t PtyReplicaFile::Read(void* buf, uint64_t n, int64_t offset,
                             const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  return pty_->ReplicaRead(buf, n, (StatusFlags() & O_NONBLOCK) != 0, io);
}

int64_t PtyReplicaFile::Write(const void* buf, uint64_t n, int64_t offset,
                              const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  return pty_->ReplicaWrite(buf, n, (StatusFlags() & O_NONBLOCK) != 0, io);
}

waiter::EventMask PtyReplicaFile::Readiness(waiter::EventMask mask) {
  return pty_->ReplicaReadiness(mask);
}

void PtyReplicaFile::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  pty_->replica_queue()->Add(w, mask);
}

void PtyReplicaFile::EventUnregister(waiter::Waiter* w) {
  pty_->replica_queue()->Remove(w);
}

// ---------------------------------------------------------------------------
// devpts

PtsInode::PtsInode(std::weak_ptr<Pty> pty, uint64_t dev, uint64_t ino,
                   uint32_t index, uint32_t uid)
    : pty_(std::move(pty)), dev_(dev), ino_(ino), index_(index), uid_(uid),
      time_(Now()) {}

int PtsInode::GetAttr(Attr* out) {
  *out = Attr();
  out->dev = dev_;
  out->ino = ino_;
  out->rdev = makedev(kPtsMajor + index_ / 256, index_ % 256);
  out->blksize = 1024;
  absl::MutexLock l(&mu_);
  out->mode = S_IFCHR | mode_;
  out->uid = uid_;
  out->gid = gid_;
  out->atime = out->mtime = out->ctime = time_;
  return 0;
}

int PtsInode::SetAttr(const SetAttrRequest& req) {
  if (req.set_size) return -EINVAL;
  absl::MutexLock l(&mu_);
  if (req.set_mode) mode_ = req.mode & 07777;
  if (req.set_uid) uid_ = req.uid;
  if (req.set_gid) gid_ = req.gid;
  if (req.set_atime || req.set_mtime) time_ = req.set_mtime ? req.mtime : req.atime;
  return 0;
}

int PtsInode::Open(int flags, std::shared_ptr<File>* out) {
  if (flags & O_PATH) return Inode::Open(flags, out);
  std::shared_ptr<Pty> pty = pty_.lock();
  if (pty == nullptr) return -EIO;
  int64_t r = pty->ReplicaOpening();
  if (r < 0) return static_cast<int>(r);
  *out = std::make_shared<PtyReplicaFile>(shared_from_this(), flags, pty);
  return 0;
}

namespace {

class DevPtsRoot final : public Inode {
 public:
  DevPtsRoot(DevPts* fs, uint64_t dev) : fs_(fs), dev_(dev), time_(Now()) {}
  uint32_t Type() const override { return S_IFDIR; }
  int GetAttr(Attr* out) override {
    *out = Attr();
    out->dev = dev_;
    out->ino = 1;
    out->mode = S_IFDIR | 0755;
    out->nlink = 2;
    out->atime = out->mtime = out->ctime = time_;
    return 0;
  }
  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override {
    return fs_->Lookup(name, out);
  }
  int ReadDir(std::vector<DirEntry>* out) override { return fs_->ReadDir(out); }
  bool CacheLookups() const override { return false; }
  int Create(const std::string&, const CreateRequest&,
             std::shared_ptr<Inode>*) override {
    return -EACCES;
  }
  int Link(const std::string&, const std::shared_ptr<Inode>&) override {
    return -EACCES;
  }
  int Unlink(const std::string& name, bool) override { return -EACCES; }
  int Rename(const std::string&, Inode&, const std::string&, unsigned) override {
    return -EACCES;
  }

 private:
  DevPts* const fs_;  // owns this inode
  const uint64_t dev_;
  const timespec time_;
};

// /dev/pts/ptmx: another way to /dev/ptmx, mode 0 by default as Linux's
// ptmxmode=000.
class PtmxNode final : public Inode {
 public:
  PtmxNode(DevPts* fs, uint64_t dev) : fs_(fs), dev_(dev), time_(Now()) {}
  uint32_t Type() const override { return S_IFCHR; }
  int GetAttr(Attr* out) override {
    *out = Attr();
    out->dev = dev_;
    out->ino = 2;
    out->mode = S_IFCHR;
    out->rdev = makedev(5, 2);
    out->atime = out->mtime = out->ctime = time_;
    return 0;
  }
  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    return static_cast<int>(fs_->OpenMaster(shared_from_this(), flags, out));
  }

 private:
  DevPts* const fs_;
  const uint64_t dev_;
  const timespec time_;
};

}  // namespace

std::shared_ptr<DevPts> DevPts::Create(uint64_t dev, JobControl* jc) {
  std::shared_ptr<DevPts> d(new DevPts(dev, jc));
  d->root_ = std::make_shared<DevPtsRoot>(d.get(), dev);
  d->ptmx_node_ = std::make_shared<PtmxNode>(d.get(), dev);
  return d;
}

int64_t DevPts::OpenMaster(std::shared_ptr<Inode> ptmx, int flags,
                           std::shared_ptr<File>* out) {
  uint32_t index;
  std::shared_ptr<Pty> pty;
  {
    absl::MutexLock l(&mu_);
    index = 0;
    while (index < used_.size() && used_[index]) index++;
    if (index == used_.size()) used_.push_back(false);
    used_[index] = true;
    pty = std::make_shared<Pty>(shared_from_this(), index, jc_);
    // Inode numbers as Linux's devpts: the index plus 3.
    nodes_[index] = std::make_shared<PtsInode>(pty, dev_, index + 3, index, 0);
  }
  *out = std::make_shared<PtyMasterFile>(std::move(ptmx), flags, std::move(pty));
  return 0;
}

std::shared_ptr<Pty> DevPts::FindRelayed() {
  std::vector<std::shared_ptr<Pty>> ptys;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [index, node] : nodes_) {
      if (std::shared_ptr<Pty> pty = node->pty()) ptys.push_back(std::move(pty));
    }
  }
  for (const std::shared_ptr<Pty>& pty : ptys) {
    if (pty->relayed()) return pty;
  }
  return nullptr;
}

void Pty::set_relayed(bool on) {
  absl::MutexLock l(&mu_);
  relayed_ = on;
}

bool Pty::relayed() {
  absl::MutexLock l(&mu_);
  return relayed_;
}

int DevPts::Lookup(const std::string& name, std::shared_ptr<Inode>* out) {
  if (name == "ptmx") {
    *out = ptmx_node_;
    return 0;
  }
  if (name.empty() || name.size() > 9 ||
      !std::all_of(name.begin(), name.end(), ::isdigit) ||
      (name.size() > 1 && name[0] == '0')) {
    return -ENOENT;
  }
  uint32_t index = static_cast<uint32_t>(std::stoul(name));
  absl::MutexLock l(&mu_);
  auto it = nodes_.find(index);
  if (it == nodes_.end()) return -ENOENT;
  *out = it->second;
  return 0;
}

int DevPts::ReadDir(std::vector<DirEntry>* out) {
  out->clear();
  out->push_back(DirEntry{"ptmx", 2, DT_CHR});
  absl::MutexLock l(&mu_);
  for (const auto& [index, node] : nodes_) {
    out->push_back(DirEntry{std::to_string(index), node->ino(), DT_CHR});
  }
  return 0;
}

void DevPts::RemoveNode(uint32_t index) {
  std::shared_ptr<PtsInode> node;  // released outside the lock
  absl::MutexLock l(&mu_);
  auto it = nodes_.find(index);
  if (it == nodes_.end()) return;
  node = std::move(it->second);
  nodes_.erase(it);
}

void DevPts::FreeIndex(uint32_t index) {
  absl::MutexLock l(&mu_);
  if (index < used_.size()) used_[index] = false;
}

}  // namespace sandboxd::fs::tty
