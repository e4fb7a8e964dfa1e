#include "sentry/fs/file_async.h"

#include <poll.h>
#include <signal.h>

#include <atomic>

#include "sentry/fs/file.h"

namespace sandboxd::fs {

namespace {

std::atomic<AsyncSignaller*> g_signaller{nullptr};

}  // namespace

void SetAsyncSignaller(AsyncSignaller* s) {
  g_signaller.store(s, std::memory_order_release);
}

FileAsync::~FileAsync() {
  absl::MutexLock r(&reg_mu_);
  if (queue_ != nullptr) queue_->Remove(this);
}

FileAsync::Saved FileAsync::Get() const {
  absl::MutexLock l(&mu_);
  return Saved{enabled_, fd_, owner_, sig_};
}

bool FileAsync::enabled() const {
  absl::MutexLock l(&mu_);
  return enabled_;
}

AsyncOwner FileAsync::owner() const {
  absl::MutexLock l(&mu_);
  return owner_;
}

void FileAsync::set_owner(const AsyncOwner& o) {
  absl::MutexLock l(&mu_);
  owner_ = o;
}

int FileAsync::sig() const {
  absl::MutexLock l(&mu_);
  return sig_;
}

void FileAsync::set_sig(int sig) {
  absl::MutexLock l(&mu_);
  sig_ = sig;
}

void FileAsync::SetEnabled(File& f, bool on, int fd) {
  absl::MutexLock r(&reg_mu_);
  const waiter::EventMask ev = on ? f.AsyncEvents() : 0;
  {
    absl::MutexLock l(&mu_);
    enabled_ = on;
    if (on) fd_ = fd;
    events_ = ev;
  }
  if (ev != 0 && registered_file_ == nullptr) {
    auto* src = dynamic_cast<waiter::EventSource*>(&f);
    queue_ = src != nullptr ? src->event_queue() : nullptr;
    f.EventRegister(this, ev);
    registered_file_ = &f;
  } else if (ev == 0 && registered_file_ != nullptr) {
    registered_file_->EventUnregister(this);
    registered_file_ = nullptr;
    queue_.reset();
  }
}

void FileAsync::Notify(waiter::EventMask events) {
  AsyncSignal s;
  {
    absl::MutexLock l(&mu_);
    // A queue passes POLLERR and POLLHUP to everyone: keep the events
    // this file signals for (AsyncEvents).
    events &= events_;
    if (!enabled_ || events == 0 || owner_.pid == 0) return;
    s.owner = owner_;
    s.sig = sig_;
    s.fd = fd_;
  }
  // Linux's band_table, by the reason the file's driver gives.
  if (events & (POLLIN | POLLRDNORM)) {
    s.reason = POLL_IN;
    s.band = POLLIN | POLLRDNORM | POLLMSG;
  } else if (events & POLLPRI) {
    s.reason = POLL_PRI;
    s.band = POLLPRI | POLLRDBAND;
  } else if (events & (POLLOUT | POLLWRNORM)) {
    s.reason = POLL_OUT;
    s.band = POLLOUT | POLLWRNORM | POLLWRBAND;
  } else if (events & POLLERR) {
    s.reason = POLL_ERR;
    s.band = POLLERR;
  } else {
    s.reason = POLL_HUP;
    s.band = POLLHUP | POLLERR;
  }
  AsyncSignaller* sg = g_signaller.load(std::memory_order_acquire);
  if (sg != nullptr) sg->Post(s);
}

}  // namespace sandboxd::fs
