#include "sentry/fs/file.h"

#include "sentry/fs/credentials.h"

#include "sentry/fs/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <net/if.h>
#include <linux/sockios.h>
#include <termios.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "sentry/fs/inotify.h"
#include "sentry/waiter/host_poller.h"

namespace sandboxd::fs {

File::~File() { delete async_.load(std::memory_order_acquire); }

FileAsync& File::async() {
  FileAsync* a = async_.load(std::memory_order_acquire);
  if (a != nullptr) return *a;
  auto* made = new FileAsync();
  if (async_.compare_exchange_strong(a, made, std::memory_order_acq_rel)) {
    return *made;
  }
  delete made;  // another thread made it first: `a` is that one
  return *a;
}

HostFile::HostFile(UniqueFd fd) : fd_(std::move(fd)) {
  int fl = fcntl(fd_.get(), F_GETFL);
  if (fl >= 0) {
    access_mode_ = fl & O_ACCMODE;
    nonblock_ = (fl & O_NONBLOCK) != 0;
  }
  struct stat st;
  if (fstat(fd_.get(), &st) == 0) {
    stream_ = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
              S_ISCHR(st.st_mode);
    watchable_ = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
                 (S_ISCHR(st.st_mode) && ::isatty(fd_.get()) == 1);
  }
}

HostFile::~HostFile() {
  {
    absl::MutexLock l(&watch_mu_);
    if (watch_handle_ != 0) waiter::HostPoller::Get()->Remove(fd_.get(), watch_handle_);
  }
  // Epoll interests (which hold files weakly) learn that the file is gone.
  queue_->Notify(POLLHUP);
}

waiter::EventMask HostFile::Readiness(waiter::EventMask mask) {
  struct pollfd p = {fd_.get(), static_cast<short>(mask), 0};
  int n = ::poll(&p, 1, 0);
  if (n < 0) return POLLERR;
  return static_cast<uint16_t>(p.revents) & (mask | POLLERR | POLLHUP);
}

// The host fd is watched only while someone waits on it: an idle stdout
// would otherwise wake the poller thread at every write the reader drains.
void HostFile::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  queue_->Add(w, mask);
  if (!watchable_) return;
  if (w->NeedsPromptNotify()) waiter::HostPoller::NeedThread();
  absl::MutexLock l(&watch_mu_);
  if (watch_handle_ != 0) return;
  waiter::HostPoller* p = waiter::HostPoller::Get();
  if (p == nullptr) return;
  int64_t h = p->Add(fd_.get(), queue_);
  if (h > 0) watch_handle_ = static_cast<uint64_t>(h);
}

void HostFile::EventUnregister(waiter::Waiter* w) {
  queue_->Remove(w);
  if (!watchable_) return;
  if (w->NeedsPromptNotify()) waiter::HostPoller::DoneWithThread();
  absl::MutexLock l(&watch_mu_);
  // Checked under watch_mu_, which EventRegister holds after adding its
  // waiter: a concurrent registration either is seen here or re-adds the
  // watch after this removed it.
  if (watch_handle_ != 0 && queue_->empty()) {
    waiter::HostPoller::Get()->Remove(fd_.get(), watch_handle_);
    watch_handle_ = 0;
  }
}

std::shared_ptr<waiter::WaitQueue> HostFile::event_queue() {
  return watchable_ ? queue_ : nullptr;
}

// The host description is shared with whoever started the sandbox, so its
// O_NONBLOCK flag is not ours to change: a read or write that could block
// first polls the fd together with the task's interrupt eventfd. Regular
// files never block; streams (pipes, sockets, terminals) do.
int64_t HostFile::WaitReady(short events, const IoContext& io) {
  for (;;) {
    struct pollfd p[2] = {{fd_.get(), events, 0}, {io.interrupt_fd, POLLIN, 0}};
    const bool sleeps = !nonblock_ && io.blocker != nullptr;
    if (sleeps) io.blocker->HostWaitBegin();
    int n = poll(p, io.interrupt_fd >= 0 ? 2 : 1, nonblock_ ? 0 : -1);
    if (sleeps) io.blocker->HostWaitEnd();
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (io.interrupt_fd >= 0 && (p[1].revents & POLLIN)) return -EINTR;
    if (p[0].revents != 0) return 0;
    if (nonblock_) return -EAGAIN;
  }
}

int64_t HostFile::Read(void* buf, uint64_t n, int64_t offset,
                       const IoContext& io) {
  if (access_mode_ == O_WRONLY) return -EBADF;
  for (;;) {
    if (stream_) {
      int64_t w = WaitReady(POLLIN, io);
      if (w < 0) return w;
    }
    ssize_t r = offset < 0 ? ::read(fd_.get(), buf, n)
                           : ::pread(fd_.get(), buf, n, offset);
    if (r >= 0) return r;
    if (errno == EINTR || (errno == EAGAIN && stream_ && !nonblock_)) continue;
    return -errno;
  }
}

int64_t HostFile::Write(const void* buf, uint64_t n, int64_t offset,
                        const IoContext& io) {
  if (access_mode_ == O_RDONLY) return -EBADF;
  for (;;) {
    uint64_t chunk = n;
    if (stream_) {
      int64_t w = WaitReady(POLLOUT, io);
      if (w < 0) return w;
      // POLLOUT promises room for PIPE_BUF bytes: a write of at most that
      // much cannot block, so an interrupt is never stuck behind it.
      chunk = std::min<uint64_t>(n, 4096);
    }
    ssize_t r = offset < 0 ? ::write(fd_.get(), buf, chunk)
                           : ::pwrite(fd_.get(), buf, chunk, offset);
    if (r >= 0) return r;
    if (errno == EINTR || (errno == EAGAIN && stream_ && !nonblock_)) continue;
    return -errno;
  }
}

int64_t HostFile::Seek(int64_t offset, int whence) {
  off_t r = ::lseek(fd_.get(), offset, whence);
  return r < 0 ? -errno : r;
}

int64_t HostFile::Stat(struct stat* st) {
  return ::fstat(fd_.get(), st) < 0 ? -errno : 0;
}

// struct termios as the kernel defines it: four tcflag_t, c_line, NCCS=19.
constexpr int64_t kKernelTermiosSize = 4 * 4 + 1 + 19;

int64_t IoctlArgSize(uint64_t request, bool* copy_in, bool* copy_out) {
  *copy_in = false;
  *copy_out = false;
  switch (request) {
    case TCGETS:
      // The kernel's struct termios (asm/termbits.h), not glibc's larger one.
      *copy_out = true;
      return kKernelTermiosSize;
    case TIOCGWINSZ:
      *copy_out = true;
      return sizeof(struct winsize);
    case FIONREAD:
    case TIOCOUTQ:     // SIOCOUTQ on sockets
    case 0x8905:       // SIOCATMARK
      *copy_out = true;
      return sizeof(int);
    case TIOCGPGRP:
      *copy_out = true;
      return sizeof(pid_t);
    // A socket's last receive time (socket/host_socket.h): a struct
    // timeval or timespec, both 16 bytes on x86-64, under the old numbers
    // and the y2038 ones (_IOR(0x89, 6|7, long long[2])).
    case SIOCGSTAMP_OLD: case SIOCGSTAMPNS_OLD:
    case SIOCGSTAMP_NEW: case SIOCGSTAMPNS_NEW:
      *copy_out = true;
      return 16;
    // The sockets' SIOCGIF* requests (socket/host_socket.h): a struct
    // ifreq in and out.
    case SIOCGIFNAME: case SIOCGIFFLAGS: case SIOCGIFADDR:
    case SIOCGIFDSTADDR: case SIOCGIFBRDADDR: case SIOCGIFNETMASK:
    case SIOCGIFMETRIC: case SIOCGIFMTU: case SIOCGIFHWADDR:
    case SIOCGIFINDEX: case SIOCGIFTXQLEN:
      *copy_in = true;
      *copy_out = true;
      return sizeof(struct ifreq);
    default:
      return -1;
  }
}

int64_t HostFile::Ioctl(uint64_t request, void* buf) {
  switch (request) {
    case TCGETS:
    case TIOCGWINSZ:
    case FIONREAD:
      return ::ioctl(fd_.get(), request, buf) < 0 ? -errno : 0;
    case TIOCGPGRP: {
      // The sandbox has its own process groups: its init's group owns a
      // terminal it inherited. Job control comes with the kernel's sessions.
      if (::isatty(fd_.get()) == 0) return -ENOTTY;
      *static_cast<pid_t*>(buf) = 1;
      return 0;
    }
    default:
      return -ENOTTY;
  }
}

int HostFile::StatusFlags() const {
  return access_mode_ | (nonblock_ ? O_NONBLOCK : 0);
}

int64_t HostFile::SetStatusFlags(int flags) {
  nonblock_ = (flags & O_NONBLOCK) != 0;
  return 0;
}

// ---------------------------------------------------------------------------
// InodeFile

void AttrToStat(const Attr& a, struct stat* st) {
  *st = {};
  st->st_dev = a.dev;
  st->st_ino = a.ino;
  st->st_mode = a.mode;
  st->st_nlink = a.nlink;
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_rdev = a.rdev;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blksize = a.blksize;
  st->st_blocks = static_cast<blkcnt_t>(a.blocks);
  st->st_atim = a.atime;
  st->st_mtim = a.mtime;
  st->st_ctim = a.ctime;
}

InodeFile::InodeFile(std::shared_ptr<Inode> inode, int flags)
    : inode_(std::move(inode)), flags_(flags) {}

InodeFile::~InodeFile() {
  ReleaseDescriptionLocks(inode_.get(), this);
  if (inode_ != nullptr && !(flags_ & O_PATH)) inode_->DescriptionClosed();
  if (!(flags_ & O_PATH) && inotify::Active()) {
    int acc = flags_ & O_ACCMODE;
    bool wrote = acc == O_WRONLY || acc == O_RDWR;
    inotify::NotifyFile(vfs_, loc_,
                        wrote ? IN_CLOSE_WRITE : IN_CLOSE_NOWRITE);
  }
}

int64_t InodeFile::Read(void* buf, uint64_t n, int64_t offset,
                        const IoContext& io) {
  int64_t r = ReadLocked(buf, n, offset);
  if (r > 0 && inotify::Active()) inotify::NotifyFile(vfs_, loc_, IN_ACCESS);
  return r;
}

int64_t InodeFile::ReadLocked(void* buf, uint64_t n, int64_t offset) {
  absl::MutexLock l(&mu_);
  if ((flags_ & O_PATH) || (flags_ & O_ACCMODE) == O_WRONLY) return -EBADF;
  if (inode_->Type() == S_IFDIR) return -EISDIR;
  int64_t off = offset >= 0 ? offset : offset_;
  int64_t r = inode_->Read(buf, n, static_cast<uint64_t>(off));
  if (r > 0 && offset < 0) offset_ += r;
  return r;
}

int64_t InodeFile::Write(const void* buf, uint64_t n, int64_t offset,
                         const IoContext& io) {
  int64_t r = WriteLocked(buf, n, offset);
  if (r > 0 && inotify::Active()) inotify::NotifyFile(vfs_, loc_, IN_MODIFY);
  return r;
}

int64_t InodeFile::WriteLocked(const void* buf, uint64_t n, int64_t offset) {
  absl::MutexLock l(&mu_);
  if ((flags_ & O_PATH) || (flags_ & O_ACCMODE) == O_RDONLY) return -EBADF;
  if (inode_->Type() == S_IFDIR) return -EISDIR;
  int64_t off = offset >= 0 ? offset : offset_;
  if (offset < 0 && (flags_ & O_APPEND)) {
    Attr a;
    int r = inode_->GetAttr(&a);
    if (r < 0) return r;
    off = static_cast<int64_t>(a.size);
  }
  // file_remove_privs: a write by someone without CAP_FSETID drops
  // set-user-ID, and set-group-ID with group execute. (Callers that are no
  // task's act with every capability.)
  if (const Credentials* c = CurrentCredentials();
      c != nullptr && !c->HasCap(CAP_FSETID) && inode_->Type() == S_IFREG) {
    Attr a;
    if (inode_->GetAttr(&a) == 0) {
      uint32_t kill = a.mode & S_ISUID;
      if ((a.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)) kill |= S_ISGID;
      if (kill != 0) {
        SetAttrRequest req;
        req.set_mode = true;
        req.mode = a.mode & 07777 & ~kill;
        inode_->SetAttr(req);
      }
    }
  }
  int64_t r = inode_->Write(buf, n, static_cast<uint64_t>(off));
  if (r > 0 && offset < 0) offset_ = off + r;
  return r;
}

int64_t InodeFile::Seek(int64_t offset, int whence) {
  absl::MutexLock l(&mu_);
  if (flags_ & O_PATH) return -EBADF;
  int64_t base = 0;
  switch (whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = offset_; break;
    case SEEK_END: {
      Attr a;
      int r = inode_->GetAttr(&a);
      if (r < 0) return r;
      base = static_cast<int64_t>(a.size);
      break;
    }
    case SEEK_DATA:
    case SEEK_HOLE: {
      // Without hole tracking every byte is data, and EOF is the hole.
      Attr a;
      int r = inode_->GetAttr(&a);
      if (r < 0) return r;
      if (offset < 0 || static_cast<uint64_t>(offset) >= a.size) return -ENXIO;
      offset_ = whence == SEEK_DATA ? offset : static_cast<int64_t>(a.size);
      return offset_;
    }
    default:
      return -EINVAL;
  }
  if ((offset > 0 && base > INT64_MAX - offset)) return -EOVERFLOW;
  int64_t next = base + offset;
  if (next < 0) return -EINVAL;
  offset_ = next;
  if (inode_->Type() == S_IFDIR && next == 0) have_entries_ = false;
  return offset_;
}

int64_t InodeFile::Stat(struct stat* st) {
  Attr a;
  int r = inode_->GetAttr(&a);
  if (r < 0) return r;
  AttrToStat(a, st);
  return 0;
}

int64_t InodeFile::Ioctl(uint64_t request, void* buf) {
  if (request == FIONREAD && inode_->Type() == S_IFREG) {
    Attr a;
    int r = inode_->GetAttr(&a);
    if (r < 0) return r;
    absl::MutexLock l(&mu_);
    int64_t left = static_cast<int64_t>(a.size) - offset_;
    *static_cast<int*>(buf) = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, INT32_MAX)));
    return 0;
  }
  return -ENOTTY;
}

int InodeFile::StatusFlags() const {
  absl::MutexLock l(&const_cast<InodeFile*>(this)->mu_);
  return flags_ & ~(O_CLOEXEC | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC);
}

int64_t InodeFile::SetStatusFlags(int flags) {
  absl::MutexLock l(&mu_);
  constexpr int kSettable = O_APPEND | O_NONBLOCK | O_ASYNC | O_DIRECT | O_NOATIME;
  flags_ = (flags_ & ~kSettable) | (flags & kSettable);
  return 0;
}

int64_t InodeFile::GetDents(uint8_t* buf, uint64_t size) {
  int64_t r = GetDentsLocked(buf, size);
  // iterate_dir reports every successful call, the one at the end too.
  if (r >= 0 && inotify::Active()) inotify::NotifyFile(vfs_, loc_, IN_ACCESS);
  return r;
}

int64_t InodeFile::GetDentsLocked(uint8_t* buf, uint64_t size) {
  absl::MutexLock l(&mu_);
  if (flags_ & O_PATH) return -EBADF;
  if (inode_->Type() != S_IFDIR) return -ENOTDIR;
  if (!have_entries_ || offset_ == 0) {
    std::vector<DirEntry> list;
    int r = inode_->ReadDir(&list);
    if (r < 0) return r;
    Attr self;
    inode_->GetAttr(&self);
    entries_.clear();
    entries_.push_back(DirEntry{".", self.ino, DT_DIR});
    entries_.push_back(DirEntry{"..", self.ino, DT_DIR});
    for (auto& e : list) entries_.push_back(std::move(e));
    have_entries_ = true;
  }
  uint64_t used = 0;
  while (offset_ >= 0 && static_cast<uint64_t>(offset_) < entries_.size()) {
    const DirEntry& e = entries_[offset_];
    // struct linux_dirent64: ino, off, reclen, type, name\0, 8-byte aligned.
    uint64_t reclen = (19 + e.name.size() + 1 + 7) & ~7ull;
    if (used + reclen > size) {
      if (used == 0) return -EINVAL;
      break;
    }
    uint8_t* rec = buf + used;
    std::memset(rec, 0, reclen);
    uint64_t ino = e.ino, next = static_cast<uint64_t>(offset_) + 1;
    uint16_t rl = static_cast<uint16_t>(reclen);
    std::memcpy(rec, &ino, 8);
    std::memcpy(rec + 8, &next, 8);
    std::memcpy(rec + 16, &rl, 2);
    rec[18] = e.type;
    std::memcpy(rec + 19, e.name.data(), e.name.size());
    used += reclen;
    offset_++;
  }
  return static_cast<int64_t>(used);
}

// ---------------------------------------------------------------------------
// FdTable

int64_t FdTable::Install(std::shared_ptr<File> f, bool cloexec, int min_fd) {
  absl::MutexLock l(&mu_);
  if (min_fd < 0) return -EINVAL;
  for (size_t i = min_fd; i < max_fds_; i++) {
    if (i >= fds_.size()) fds_.resize(i + 1);
    if (fds_[i].file == nullptr) {
      fds_[i] = Entry{std::move(f), cloexec};
      return static_cast<int64_t>(i);
    }
  }
  return min_fd >= static_cast<int64_t>(max_fds_) ? -EINVAL : -EMFILE;
}

int64_t FdTable::InstallAt(int fd, std::shared_ptr<File> f, bool cloexec) {
  std::shared_ptr<File> old;
  {
    absl::MutexLock l(&mu_);
    if (fd < 0 || static_cast<uint64_t>(fd) >= max_fds_) return -EBADF;
    if (static_cast<size_t>(fd) >= fds_.size()) fds_.resize(fd + 1);
    old = std::move(fds_[fd].file);
    fds_[fd] = Entry{std::move(f), cloexec};
  }
  Dropped(old);
  return fd;
}

std::shared_ptr<File> FdTable::Get(int fd) const {
  absl::MutexLock l(&mu_);
  if (fd < 0 || static_cast<size_t>(fd) >= fds_.size()) return nullptr;
  return fds_[fd].file;
}

std::vector<int> FdTable::Fds() const {
  absl::MutexLock l(&mu_);
  std::vector<int> out;
  for (size_t i = 0; i < fds_.size(); i++) {
    if (fds_[i].file != nullptr) out.push_back(static_cast<int>(i));
  }
  return out;
}

int64_t FdTable::Close(int fd) {
  std::shared_ptr<File> old;
  {
    absl::MutexLock l(&mu_);
    if (fd < 0 || static_cast<size_t>(fd) >= fds_.size() ||
        fds_[fd].file == nullptr) {
      return -EBADF;
    }
    old = std::move(fds_[fd].file);
    fds_[fd].cloexec = false;
  }
  Dropped(old);
  return 0;
}

FdTable::~FdTable() {
  for (Entry& e : fds_) Dropped(e.file);
}

void FdTable::Dropped(const std::shared_ptr<File>& f) {
  if (f != nullptr) ReleasePosixLocks(f->inode().get(), this);
}

int64_t FdTable::GetCloexec(int fd) const {
  absl::MutexLock l(&mu_);
  if (fd < 0 || static_cast<size_t>(fd) >= fds_.size() ||
      fds_[fd].file == nullptr) {
    return -EBADF;
  }
  return fds_[fd].cloexec ? 1 : 0;
}

int64_t FdTable::SetCloexec(int fd, bool cloexec) {
  absl::MutexLock l(&mu_);
  if (fd < 0 || static_cast<size_t>(fd) >= fds_.size() ||
      fds_[fd].file == nullptr) {
    return -EBADF;
  }
  fds_[fd].cloexec = cloexec;
  return 0;
}

std::shared_ptr<FdTable> FdTable::Fork() const {
  absl::MutexLock l(&mu_);
  auto t = std::make_shared<FdTable>(max_fds_);
  absl::MutexLock tl(&t->mu_);
  t->fds_ = fds_;
  return t;
}

void FdTable::CloseOnExec() {
  std::vector<std::shared_ptr<File>> closing;
  {
    absl::MutexLock l(&mu_);
    for (Entry& e : fds_) {
      if (e.file != nullptr && e.cloexec) {
        closing.push_back(std::move(e.file));
        e.cloexec = false;
      }
    }
  }
  for (const auto& f : closing) Dropped(f);
}

void FdTable::CloseRange(uint32_t first, uint32_t last, bool cloexec_only) {
  std::vector<std::shared_ptr<File>> closing;
  {
    absl::MutexLock l(&mu_);
    const size_t end = std::min<size_t>(fds_.size(), static_cast<size_t>(last) + 1);
    for (size_t fd = first; fd < end; ++fd) {
      Entry& e = fds_[fd];
      if (e.file == nullptr) continue;
      if (cloexec_only) {
        e.cloexec = true;
      } else {
        closing.push_back(std::move(e.file));
        e.cloexec = false;
      }
    }
  }
  for (const auto& f : closing) Dropped(f);
}

void FdTable::set_max_fds(uint64_t n) {
  absl::MutexLock l(&mu_);
  max_fds_ = n;
}

}  // namespace sandboxd::fs
