#include "sentry/fs/file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>

namespace sandboxd::fs {

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
  }
}

// The host description is shared with whoever started the sandbox, so its
// O_NONBLOCK flag is not ours to change: a read or write that could block
// first polls the fd together with the task's interrupt eventfd. Regular
// files never block; streams (pipes, sockets, terminals) do.
int64_t HostFile::WaitReady(short events, const IoContext& io) {
  for (;;) {
    struct pollfd p[2] = {{fd_.get(), events, 0}, {io.interrupt_fd, POLLIN, 0}};
    int n = poll(p, io.interrupt_fd >= 0 ? 2 : 1, nonblock_ ? 0 : -1);
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

int64_t IoctlArgSize(uint64_t request, bool* copy_in, bool* copy_out) {
  *copy_in = false;
  *copy_out = false;
  switch (request) {
    case TCGETS:
      *copy_out = true;
      return sizeof(struct termios);
    case TIOCGWINSZ:
      *copy_out = true;
      return sizeof(struct winsize);
    case FIONREAD:
      *copy_out = true;
      return sizeof(int);
    case TIOCGPGRP:
      *copy_out = true;
      return sizeof(pid_t);
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
  std::shared_ptr<File> old;  // released outside the lock
  absl::MutexLock l(&mu_);
  if (fd < 0 || static_cast<uint64_t>(fd) >= max_fds_) return -EBADF;
  if (static_cast<size_t>(fd) >= fds_.size()) fds_.resize(fd + 1);
  old = std::move(fds_[fd].file);
  fds_[fd] = Entry{std::move(f), cloexec};
  return fd;
}

std::shared_ptr<File> FdTable::Get(int fd) const {
  absl::MutexLock l(&mu_);
  if (fd < 0 || static_cast<size_t>(fd) >= fds_.size()) return nullptr;
  return fds_[fd].file;
}

int64_t FdTable::Close(int fd) {
  std::shared_ptr<File> old;
  absl::MutexLock l(&mu_);
  if (fd < 0 || static_cast<size_t>(fd) >= fds_.size() ||
      fds_[fd].file == nullptr) {
    return -EBADF;
  }
  old = std::move(fds_[fd].file);
  fds_[fd].cloexec = false;
  return 0;
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

void FdTable::set_max_fds(uint64_t n) {
  absl::MutexLock l(&mu_);
  max_fds_ = n;
}

}  // namespace sandboxd::fs
