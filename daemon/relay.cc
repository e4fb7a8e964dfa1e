#include "daemon/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <utility>

#include "base/status_macros.h"

namespace sandboxd {
namespace daemon {
namespace {

// How long output may stay quiet after the process exited before it is
// considered complete.
constexpr int kQuietAfterExitMs = 200;

absl::Status Pipe(UniqueFd* r, UniqueFd* w) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
  r->reset(p[0]);
  w->reset(p[1]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StdioPair> StdioPair::Make(bool tty) {
  StdioPair s;
  s.tty = tty;
  if (tty) {
    UniqueFd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!master.valid()) return ErrnoStatus("posix_openpt", errno);
    if (grantpt(master.get()) != 0 || unlockpt(master.get()) != 0) {
      return ErrnoStatus("unlockpt", errno);
    }
    char name[64];
    if (ptsname_r(master.get(), name, sizeof(name)) != 0) return ErrnoStatus("ptsname", errno);
    UniqueFd slave(open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!slave.valid()) return ErrnoStatus(absl::StrCat("opening ", name), errno);
    winsize ws{};
    ws.ws_row = 24;
    ws.ws_col = 80;
    ioctl(master.get(), TIOCSWINSZ, &ws);
    s.in.reset(fcntl(master.get(), F_DUPFD_CLOEXEC, 0));
    if (!s.in.valid()) return ErrnoStatus("dup", errno);
    s.out = std::move(master);
    s.theirs.push_back(std::move(slave));
    return s;
  }
  UniqueFd in_r, out_w, err_w;
  RETURN_IF_ERROR(Pipe(&in_r, &s.in));
  RETURN_IF_ERROR(Pipe(&s.out, &out_w));
  RETURN_IF_ERROR(Pipe(&s.err, &err_w));
  s.theirs.push_back(std::move(in_r));
  s.theirs.push_back(std::move(out_w));
  s.theirs.push_back(std::move(err_w));
  return s;
}

std::vector<int> StdioPair::TheirFds() const {
  std::vector<int> fds;
  for (const UniqueFd& f : theirs) fds.push_back(f.get());
  return fds;
}

ProcessRelay::ProcessRelay(StdioPair* stdio, size_t log_capacity)
    : log_(log_capacity),
      tty_(stdio->tty),
      out_(std::move(stdio->out)),
      err_(std::move(stdio->err)),
      wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      in_(std::move(stdio->in)) {
  // Writes to stdin wait in poll, where Stop can interrupt them.
  if (in_.valid()) fcntl(in_.get(), F_SETFL, fcntl(in_.get(), F_GETFL) | O_NONBLOCK);
}

ProcessRelay::~ProcessRelay() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

std::vector<int> ProcessRelay::OutputFds() const {
  std::vector<int> fds;
  if (out_.valid()) fds.push_back(out_.get());
  if (err_.valid()) fds.push_back(err_.get());
  return fds;
}

int ProcessRelay::StdinFd() {
  absl::MutexLock l(&in_mu_);
  return in_.get();
}

void ProcessRelay::Start() {
  thread_ = std::thread([this] { RelayLoop(); });
}

void ProcessRelay::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

void ProcessRelay::ProcessExited() {
  exited_.store(true);
  Wake();
}

bool ProcessRelay::AwaitOutputEnd(absl::Duration timeout) {
  if (!thread_.joinable()) return false;
  return output_ended_.WaitForNotificationWithTimeout(timeout);
}

void ProcessRelay::Stop() {
  stopped_.store(true);
  Wake();
  log_.Close();  // also frees a relay waiting on a pinned reader
}

void ProcessRelay::RelayLoop() {
  bool out_open = out_.valid(), err_open = err_.valid();
  char buf[32 << 10];
  while ((out_open || err_open) && !stopped_.load()) {
    pollfd p[3] = {{wake_.get(), POLLIN, 0},
                   {out_open ? out_.get() : -1, POLLIN, 0},
                   {err_open ? err_.get() : -1, POLLIN, 0}};
    const int timeout = exited_.load() ? kQuietAfterExitMs : -1;
    int n = poll(p, 3, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;  // exited, and quiet since
    if (p[0].revents) {
      uint64_t v;
      (void)!read(wake_.get(), &v, sizeof(v));
    }
    for (int i = 1; i < 3; i++) {
      if (p[i].revents == 0) continue;
      const int fd = i == 1 ? out_.get() : err_.get();
      ssize_t r = read(fd, buf, sizeof(buf));
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      // A pty master reads EIO once no slave is open: end of output.
      if (r <= 0) {
        (i == 1 ? out_open : err_open) = false;
        continue;
      }
      log_.Append(i == 1 ? OutputStream::kStdout : OutputStream::kStderr,
                  std::string(buf, static_cast<size_t>(r)));
    }
  }
  log_.Close();
  output_ended_.Notify();
}

absl::Status ProcessRelay::WriteStdin(absl::string_view data) {
  absl::MutexLock l(&in_mu_);
  while (!data.empty()) {
    if (!in_.valid()) return absl::FailedPreconditionError("stdin is closed");
    if (stopped_.load()) return absl::FailedPreconditionError("the process has ended");
    ssize_t r = write(in_.get(), data.data(), data.size());
    if (r > 0) {
      data.remove_prefix(static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) {
      pollfd p[2] = {{in_.get(), POLLOUT, 0}, {wake_.get(), POLLIN, 0}};
      // The wake fd is also read by the relay thread; poll with a timeout so
      // that a wake it consumed is noticed through stopped_ soon enough.
      poll(p, 2, 100);
      continue;
    }
    return ErrnoStatus("writing to the process's stdin", errno);
  }
  return absl::OkStatus();
}

void ProcessRelay::CloseStdin() {
  absl::MutexLock l(&in_mu_);
  in_.reset();
}

absl::Status ProcessRelay::Resize(uint32_t rows, uint32_t cols) {
  if (!tty_) return absl::FailedPreconditionError("resize: the process has no terminal");
  winsize ws{};
  ws.ws_row = static_cast<unsigned short>(rows);
  ws.ws_col = static_cast<unsigned short>(cols);
  if (ioctl(out_.get(), TIOCSWINSZ, &ws) != 0) return ErrnoStatus("TIOCSWINSZ", errno);
  return absl::OkStatus();
}

}  // namespace daemon
}  // namespace sandboxd
