#include "sentry/fs/tty/host_tty.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace sandboxd::fs::tty {

HostTerminal::HostTerminal(UniqueFd fd, JobControl* jc)
    : Terminal(jc), fd_(std::move(fd)) {
  struct stat st;
  if (fstat(fd_.get(), &st) == 0) rdev_ = st.st_rdev;
}

bool HostTerminal::Same(int fd) const {
  struct stat st;
  return isatty(fd) == 1 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) &&
         st.st_rdev == rdev_;
}

std::shared_ptr<File> HostTerminal::OpenHostFd(int fd) {
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (d < 0) return nullptr;
  return std::make_shared<HostTtyFile>(
      UniqueFd(d), std::static_pointer_cast<Terminal>(shared_from_this()));
}

int64_t HostTerminal::OpenProgramSide(int flags, std::shared_ptr<Inode> via,
                                      std::shared_ptr<File>* out) {
  // Every opener of a terminal shares its device; the host description's
  // flags are not ours to change, and HostFile keeps O_NONBLOCK itself.
  std::shared_ptr<File> f = OpenHostFd(fd_.get());
  if (f == nullptr) return -errno;
  if (via != nullptr) {
    static_cast<HostTtyFile&>(*f).set_stat_node(std::move(via));
  }
  if (flags & O_NONBLOCK) f->SetStatusFlags(f->StatusFlags() | O_NONBLOCK);
  *out = std::move(f);
  return 0;
}

int64_t HostTerminal::GetTermios(KernelTermios* out) {
  return ::ioctl(fd_.get(), TCGETS, out) < 0 ? -errno : 0;
}

int64_t HostTerminal::SetTermios(const KernelTermios& t, bool flush_input) {
  unsigned long req = flush_input ? TCSETSF : TCSETS;
  return ::ioctl(fd_.get(), req, &t) < 0 ? -errno : 0;
}

int64_t HostTerminal::GetWinsize(struct winsize* out) {
  return ::ioctl(fd_.get(), TIOCGWINSZ, out) < 0 ? -errno : 0;
}

int64_t HostTerminal::SetWinsize(const struct winsize& ws) {
  // The host terminal sends its SIGWINCH to its own foreground group, the
  // Sentry, which forwards it as HostResized: no signal from here.
  return ::ioctl(fd_.get(), TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

int64_t HostTerminal::InputQueued(int* out) {
  return ::ioctl(fd_.get(), FIONREAD, out) < 0 ? -errno : 0;
}

int64_t HostTerminal::OutputQueued(int* out) {
  return ::ioctl(fd_.get(), TIOCOUTQ, out) < 0 ? -errno : 0;
}

int64_t HostTerminal::Flush(int queue) {
  if (queue != TCIFLUSH && queue != TCOFLUSH && queue != TCIOFLUSH) {
    return -EINVAL;
  }
  return ::ioctl(fd_.get(), TCFLSH, queue) < 0 ? -errno : 0;
}

HostTtyFile::HostTtyFile(UniqueFd fd, std::shared_ptr<Terminal> term)
    : HostFile(std::move(fd)), term_(std::move(term)) {}

int64_t HostTtyFile::Read(void* buf, uint64_t n, int64_t offset,
                          const IoContext& io) {
  int64_t r = term_->job_control()->CheckAccess(*term_, io, SIGTTIN, false);
  if (r < 0) return r;
  return HostFile::Read(buf, n, offset, io);
}

int64_t HostTtyFile::Write(const void* buf, uint64_t n, int64_t offset,
                           const IoContext& io) {
  KernelTermios t;
  if (term_->GetTermios(&t) == 0 && (t.c_lflag & TOSTOP)) {
    int64_t r = term_->job_control()->CheckAccess(*term_, io, SIGTTOU, true);
    if (r < 0) return r;
  }
  return HostFile::Write(buf, n, offset, io);
}

int64_t HostTtyFile::Stat(struct stat* st) {
  const std::shared_ptr<Inode>& node =
      stat_node_ != nullptr ? stat_node_
                            : static_cast<HostTerminal&>(*term_).node();
  if (node == nullptr) return HostFile::Stat(st);
  Attr a;
  int r = node->GetAttr(&a);
  if (r < 0) return r;
  AttrToStat(a, st);
  return 0;
}

}  // namespace sandboxd::fs::tty
