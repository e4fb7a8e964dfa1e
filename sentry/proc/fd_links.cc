#include "sentry/proc/fd_links.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/file.h"
#include "sentry/fs/mappable.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/timerfd.h"
#include "sentry/fs/tty/terminal.h"
#include "sentry/fs/vfs.h"
#include "sentry/mm/mm.h"
#include "sentry/proc/format.h"
#include "sentry/proc/inodes.h"

namespace sandboxd::fs::proc {
namespace {

// An inode standing for an open file that has no Location: stat gives the
// file's own stat; opening gives ENXIO (sockets, eventfd, epoll, timerfd:
// as Linux's sockfs and anon inodes).
class OpenFileInode : public Inode {
 public:
  explicit OpenFileInode(std::shared_ptr<File> file) : file_(std::move(file)) {
    struct stat st;
    if (file_->Stat(&st) == 0) type_ = st.st_mode & S_IFMT;
  }
  uint32_t Type() const override { return type_; }
  int GetAttr(Attr* out) override {
    struct stat st;
    int64_t r = file_->Stat(&st);
    if (r < 0) return static_cast<int>(r);
    *out = Attr();
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    out->mode = st.st_mode;
    out->nlink = st.st_nlink;
    out->size = st.st_size;
    out->rdev = st.st_rdev;
    out->atime = st.st_atim;
    out->mtime = st.st_mtim;
    out->ctime = st.st_ctim;
    return 0;
  }
  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    return Reopen(flags, out);
  }

 protected:
  virtual int Reopen(int flags, std::shared_ptr<File>* out) { return -ENXIO; }
  const std::shared_ptr<File> file_;

 private:
  uint32_t type_ = S_IFREG;
};

// A pipe's end: opening it opens the pipe again, as a FIFO: a new read
// end, write end, or both.
class PipeLinkInode final : public OpenFileInode {
 public:
  using OpenFileInode::OpenFileInode;

 protected:
  int Reopen(int flags, std::shared_ptr<File>* out) override {
    auto* end = static_cast<PipeEnd*>(file_.get());
    const int keep = flags & (O_NONBLOCK | O_DIRECT);
    switch (flags & O_ACCMODE) {
      case O_RDONLY:
        *out = std::make_shared<PipeEnd>(end->pipe_ptr(), false, keep);
        return 0;
      case O_WRONLY:
        *out = std::make_shared<PipeEnd>(end->pipe_ptr(), true, keep);
        return 0;
      case O_RDWR:
        *out = std::make_shared<PipeReadWrite>(end->pipe_ptr(), keep);
        return 0;
      default:
        return -EINVAL;
    }
  }
};

// An inherited host descriptor (stdio): opening it gives a new descriptor
// of the same host open file description (its offset is shared, unlike a
// Linux reopen; the host path is never looked at).
class HostLinkInode final : public OpenFileInode {
 public:
  using OpenFileInode::OpenFileInode;

 protected:
  int Reopen(int flags, std::shared_ptr<File>* out) override {
    auto* hf = static_cast<HostFile*>(file_.get());
    int d = fcntl(hf->host_fd(), F_DUPFD_CLOEXEC, 3);
    if (d < 0) return -errno;
    auto f = std::make_shared<HostFile>(UniqueFd(d));
    if (flags & O_NONBLOCK) f->SetStatusFlags(f->StatusFlags() | O_NONBLOCK);
    *out = std::move(f);
    return 0;
  }
};

}  // namespace

std::string AnonName(File& f) {
  struct stat st = {};
  f.Stat(&st);
  if (auto* p = dynamic_cast<PipeEnd*>(&f)) {
    return absl::StrCat("pipe:[", p->pipe().ino(), "]");
  }
  if (dynamic_cast<EventFd*>(&f) != nullptr) return "anon_inode:[eventfd]";
  if (dynamic_cast<EpollFile*>(&f) != nullptr) return "anon_inode:[eventpoll]";
  if (dynamic_cast<TimerFd*>(&f) != nullptr) return "anon_inode:[timerfd]";
  switch (st.st_mode & S_IFMT) {
    case S_IFIFO:
      return absl::StrCat("pipe:[", st.st_ino, "]");
    case S_IFSOCK:
      return absl::StrCat("socket:[", st.st_ino, "]");
    case S_IFCHR:
      if (st.st_rdev == makedev(1, 3)) return "/dev/null";
      if (major(st.st_rdev) == 136) {
        return absl::StrCat("/dev/pts/", minor(st.st_rdev));
      }
      if (st.st_rdev == makedev(5, 0)) return "/dev/tty";
      break;
    default:
      break;
  }
  // A host file the sandbox has no name for.
  return absl::StrCat("anon_inode:[host:", st.st_ino, "]");
}

std::shared_ptr<Inode> OpenFileInodeFor(std::shared_ptr<File> f) {
  if (dynamic_cast<PipeEnd*>(f.get()) != nullptr) {
    return std::make_shared<PipeLinkInode>(std::move(f));
  }
  if (dynamic_cast<HostFile*>(f.get()) != nullptr) {
    return std::make_shared<HostLinkInode>(std::move(f));
  }
  return std::make_shared<OpenFileInode>(std::move(f));
}

}  // namespace sandboxd::fs::proc
