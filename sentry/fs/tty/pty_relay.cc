#include "sentry/fs/tty/pty_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <termios.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "base/status_macros.h"
#include "base/thread.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::fs::tty {

// Registered on the pair's master queue: any change wakes the loop.
class PtyRelay::Waker final : public waiter::Waiter {
 public:
  explicit Waker(PtyRelay* r) : r_(r) {}
  void Notify(waiter::EventMask) override { r_->Wake(); }

 private:
  PtyRelay* const r_;
};

absl::StatusOr<std::unique_ptr<PtyRelay>> PtyRelay::Start(
    std::shared_ptr<File> master, UniqueFd host) {
  auto* tf = dynamic_cast<TtyFile*>(master.get());
  std::shared_ptr<Pty> pty =
      tf == nullptr ? nullptr : std::dynamic_pointer_cast<Pty>(tf->terminal());
  if (pty == nullptr || tf->program_side()) {
    return absl::InvalidArgumentError("terminal relay: not a pty master");
  }
  int fl = fcntl(host.get(), F_GETFL);
  if (fl < 0 || fcntl(host.get(), F_SETFL, fl | O_NONBLOCK) < 0) {
    return ErrnoStatus("terminal relay: making the host descriptor non-blocking", errno);
  }
  // The host pty only carries bytes: its own line discipline must not
  // echo, translate or turn ^C into a host signal (the sandbox's does).
  struct termios raw;
  if (tcgetattr(host.get(), &raw) == 0) {
    cfmakeraw(&raw);
    if (tcsetattr(host.get(), TCSANOW, &raw) != 0) {
      return ErrnoStatus("terminal relay: raw mode on the host descriptor", errno);
    }
  }
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus("terminal relay: eventfd", errno);
  struct winsize ws = {};
  if (ioctl(host.get(), TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    pty->SetWinsize(ws);
  }
  std::unique_ptr<PtyRelay> r(new PtyRelay(std::move(master), std::move(pty),
                                           std::move(host), std::move(wake)));
  r->pty_->set_relayed(true);
  r->pty_->master_queue()->Add(r->waker_.get(), POLLIN | POLLOUT);
  absl::StatusOr<std::thread> th =
      StartThread("the terminal relay's thread", [p = r.get()] { p->Loop(); });
  if (!th.ok()) {
    // As the loop's end would: the pty is the program's alone again.
    r->pty_->master_queue()->Remove(r->waker_.get());
    r->pty_->set_relayed(false);
    return th.status();
  }
  r->thread_ = std::move(*th);
  return r;
}

PtyRelay::PtyRelay(std::shared_ptr<File> master, std::shared_ptr<Pty> pty,
                   UniqueFd host, UniqueFd wake)
    : master_(std::move(master)),
      pty_(std::move(pty)),
      host_(std::move(host)),
      wake_(std::move(wake)),
      waker_(std::make_unique<Waker>(this)) {}

PtyRelay::~PtyRelay() { Stop(); }

void PtyRelay::Drain(absl::Duration max) {
  const absl::Time deadline = absl::Now() + max;
  while (!done_.load() && absl::Now() < deadline) {
    int queued = 0;
    pty_->MasterQueued(&queued);
    if (queued == 0 && in_flight_.load() == 0) return;
    Wake();
    absl::SleepFor(absl::Milliseconds(1));
  }
}

void PtyRelay::Stop() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
}

void PtyRelay::Wake() {
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

void PtyRelay::Resize(uint16_t rows, uint16_t cols) {
  struct winsize ws = {};
  pty_->GetWinsize(&ws);
  ws.ws_row = rows;
  ws.ws_col = cols;
  pty_->SetWinsize(ws);
}

// Bytes wait in `to_host` while the host side is full, and in `to_pty`
// while the line discipline's input is: neither side is read meanwhile,
// so a slow reader holds the writer up as a real terminal does.
void PtyRelay::Loop() {
  const IoContext io;  // no blocker: every call is non-blocking
  std::string to_host, to_pty;
  char buf[4096];
  bool host_gone = false;
  while (!stop_.load() && !host_gone) {
    // The program's output to the host.
    for (;;) {
      if (to_host.empty()) {
        in_flight_.store(1);
        int64_t n = pty_->MasterRead(buf, sizeof(buf), true, io);
        if (n <= 0) {  // -EAGAIN, or -EIO with no replica open
          in_flight_.store(0);
          break;
        }
        to_host.assign(buf, n);
      }
      ssize_t w = write(host_.get(), to_host.data(), to_host.size());
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) break;
      if (w <= 0) {
        host_gone = true;
        break;
      }
      to_host.erase(0, static_cast<size_t>(w));
      in_flight_.store(to_host.size());
    }
    if (host_gone) break;
    // Input from the host.
    if (!to_pty.empty()) {
      int64_t n = pty_->MasterWrite(to_pty.data(), to_pty.size(), true, io);
      if (n > 0) to_pty.erase(0, static_cast<size_t>(n));
    }
    if (to_pty.empty()) {
      ssize_t n = read(host_.get(), buf, sizeof(buf));
      if (n > 0) {
        to_pty.assign(buf, n);
        continue;
      }
      // 0 or EIO: every host master is closed.
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) break;
    }
    pollfd p[2] = {{wake_.get(), POLLIN, 0}, {host_.get(), 0, 0}};
    if (to_pty.empty()) p[1].events |= POLLIN;
    if (!to_host.empty()) p[1].events |= POLLOUT;
    if (poll(p, 2, -1) < 0 && errno != EINTR) break;
    // A hung-up host side with input still waiting: that input has no
    // one to wait for any more.
    if ((p[1].revents & (POLLHUP | POLLERR)) && !(p[1].revents & POLLIN) &&
        !to_pty.empty()) {
      break;
    }
    if (p[0].revents & POLLIN) {
      uint64_t v;
      (void)!read(wake_.get(), &v, sizeof(v));
    }
  }
  pty_->master_queue()->Remove(waker_.get());
  pty_->set_relayed(false);
  done_.store(true);
  // As a terminal emulator that goes away: the replica hangs up.
  master_.reset();
}

}  // namespace sandboxd::fs::tty
