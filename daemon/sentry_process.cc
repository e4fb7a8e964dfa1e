#include "daemon/sentry_process.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "daemon/spawn_signal_safe.h"
#include "daemon/state_dir.h"

extern char** environ;

namespace sandboxd {
namespace daemon {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSpawnSetnsFailed) {
    return absl::StrCat("exited with status ", kSpawnSetnsFailed,
                        " (before its exec: no setns into the network namespace?)");
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

absl::StatusOr<std::unique_ptr<SentryProcess>> SentryProcess::Spawn(
    const SentrySpawnOptions& options) {
  ASSIGN_OR_RETURN(auto pair, control::Channel::Pair());
  control::Channel mine = std::move(pair.first);
  control::Channel theirs = std::move(pair.second);

  int sync[2];
  if (pipe2(sync, O_CLOEXEC) != 0) return ErrnoStatus("spawning sentry: pipe2", errno);
  UniqueFd sync_r(sync[0]), sync_w(sync[1]);
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) return ErrnoStatus("spawning sentry: opening /dev/null", errno);

  // Everything the child needs, built before fork (the child may not allocate).
  std::vector<std::string> args = {options.sentry_path, "serve",
                                   absl::StrCat("--platform=", options.platform),
                                   "--control-fd=3"};
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  SpawnChildArgs child{options.sentry_path.c_str(), argv.data(), environ,
                       theirs.fd(), devnull.get(), sync_r.get(), options.netns_fd};

  // fork() into a pid namespace of its own: the Sentry is that namespace's
  // init, so its stubs die with it (sentry/README.md, "Isolation", says why
  // the Sentry cannot make the namespace itself). A raw clone without a new
  // stack returns twice, as fork does; the child only makes the raw system
  // calls of RunSpawnChild.
  pid_t pid = static_cast<pid_t>(
      syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  if (pid < 0) return ErrnoStatus("spawning sentry: clone(CLONE_NEWPID)", errno);
  if (pid == 0) RunSpawnChild(child);

  // Also set here: whichever of parent and child runs first, the group
  // exists before anything is killed through it.
  setpgid(pid, pid);
  auto process = std::unique_ptr<SentryProcess>(new SentryProcess(pid, std::move(mine)));
  theirs.release_fd();  // closed by the UniqueFd inside: the child has its copy
  if (options.before_exec) {
    absl::Status s = options.before_exec(pid);
    if (!s.ok()) return Annotate(s, "spawning sentry");  // ~SentryProcess kills it
  }
  const char go = 1;
  if (write(sync_w.get(), &go, 1) != 1) {
    return ErrnoStatus("spawning sentry: releasing the child", errno);
  }
  return process;
}

absl::StatusOr<std::unique_ptr<SentryProcess>> SentryProcess::Adopt(
    pid_t pid, const std::string& start_time, UniqueFd channel) {
  // The pidfd first, then the check: it then names the recorded process
  // (a pid reused after the check could not slip in).
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid() || start_time.empty() || ProcessStartTime(pid) != start_time ||
      IsZombie(pid)) {
    return absl::UnavailableError(absl::StrCat("sentry (pid ", pid, ") is gone"));
  }
  return std::unique_ptr<SentryProcess>(
      new SentryProcess(pid, control::Channel(std::move(channel)), std::move(pidfd)));
}

std::unique_ptr<SentryProcess> SentryProcess::Gone(pid_t pid, const std::string& reason) {
  auto p = std::unique_ptr<SentryProcess>(
      new SentryProcess(pid, control::Channel(UniqueFd()), UniqueFd()));
  p->reaped_.store(true);
  absl::MutexLock l(&p->mu_);
  p->exited_ = true;
  p->exit_reason_ = reason;
  return p;
}

SentryProcess::SentryProcess(pid_t pid, control::Channel channel, UniqueFd pidfd)
    : pid_(pid), pidfd_(std::move(pidfd)), channel_(std::move(channel)) {
  if (channel_.fd() >= 0) reader_ = std::thread([this] { ReadLoop(); });
}

SentryProcess::~SentryProcess() {
  Kill();
  // The reader ends when the channel closes (the process is gone). A
  // Sentry that sits in an uninterruptible sleep still holds its end; then
  // shutting down our end wakes the reader.
  shutdown(channel_.fd(), SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
}

void SentryProcess::Kill() {
  // Once reaped, the pid may belong to someone else.
  if (reaped_.load()) return;
  if (pidfd_.valid()) {
    // Its stubs are in its pid namespace: they die with it.
    syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    return;
  }
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
}

absl::Status SentryProcess::SignalGroup(int sig) {
  // Once reaped, the group's id may be someone else's.
  if (reaped_.load() || exited()) {
    return absl::FailedPreconditionError(absl::StrCat("sentry (pid ", pid_, ") is gone"));
  }
  if (kill(-pid_, sig) != 0) {
    return ErrnoStatus(absl::StrCat("signal ", sig, " to the sentry's process group ", pid_),
                       errno);
  }
  return absl::OkStatus();
}

void SentryProcess::ExpectExit() {
  absl::MutexLock l(&mu_);
  expect_exit_ = true;
}

void SentryProcess::SetOnExit(std::function<void(bool, const std::string&)> f) {
  absl::MutexLock l(&mu_);
  on_exit_ = std::move(f);
}

bool SentryProcess::exited() const {
  absl::MutexLock l(&mu_);
  return exited_;
}

std::string SentryProcess::exit_reason() const {
  absl::MutexLock l(&mu_);
  return exit_reason_;
}

absl::Status SentryProcess::AwaitHello(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return have_hello_ || exited_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "sentry (pid ", pid_, ") sent no Hello within ", absl::FormatDuration(timeout)));
  }
  if (!have_hello_) {
    return absl::UnavailableError(
        absl::StrCat("sentry (pid ", pid_, ") ", exit_reason_, " before its Hello"));
  }
  return absl::OkStatus();
}

absl::StatusOr<control::Response> SentryProcess::Call(control::Request request,
                                                      std::vector<UniqueFd>* received,
                                                      absl::Duration timeout) {
  return Exchange(std::move(request), {}, received, timeout);
}

absl::StatusOr<control::Response> SentryProcess::Call(control::Request request,
                                                      absl::Span<const int> fds,
                                                      absl::Duration timeout) {
  return Exchange(std::move(request), fds, nullptr, timeout);
}

absl::StatusOr<control::Response> SentryProcess::Exchange(control::Request request,
                                                          absl::Span<const int> fds,
                                                          std::vector<UniqueFd>* received,
                                                          absl::Duration timeout) {
  Pending pending;
  uint64_t id;
  {
    absl::MutexLock l(&mu_);
    if (exited_) {
      return absl::UnavailableError(
          absl::StrCat("sentry (pid ", pid_, ") ", exit_reason_));
    }
    id = next_id_++;
    pending_[id] = &pending;
  }
  request.set_id(id);
  absl::Status sent = channel_.Send(request, fds);
  absl::MutexLock l(&mu_);
  if (!sent.ok()) {
    pending_.erase(id);
    return Annotate(sent, absl::StrCat("sentry (pid ", pid_, ")"));
  }
  if (!mu_.AwaitWithTimeout(absl::Condition(&pending.done), timeout)) {
    pending_.erase(id);
    return absl::DeadlineExceededError(absl::StrCat(
        "sentry (pid ", pid_, ") did not answer within ", absl::FormatDuration(timeout)));
  }
  RETURN_IF_ERROR(pending.status);
  if (pending.response.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(pending.response.code()),
                        pending.response.message());
  }
  if (received != nullptr) *received = std::move(pending.fds);
  return std::move(pending.response);
}

void SentryProcess::ReadLoop() {
  absl::Status why;
  for (;;) {
    control::Response r;
    std::vector<UniqueFd> fds;
    why = channel_.Receive(&r, &fds);
    if (!why.ok()) break;
    absl::MutexLock l(&mu_);
    if (r.id() == 0 && r.has_hello()) {
      hello_ = r.hello();
      prewarm_timings_.assign(r.timings().begin(), r.timings().end());
      have_hello_ = true;
      continue;
    }
    auto it = pending_.find(r.id());
    if (it == pending_.end()) continue;  // its caller gave up (timeout)
    it->second->response = std::move(r);
    it->second->fds = std::move(fds);
    it->second->done = true;
    pending_.erase(it);
  }
  bool expected;
  {
    absl::MutexLock l(&mu_);
    expected = expect_exit_;
  }
  // A malformed packet means a Sentry we cannot trust: kill it.
  if (absl::IsDataLoss(why)) Kill();
  Reap(expected);
}

std::string SentryProcess::ReapAdopted(bool expected) {
  auto wait = [this](int ms) {
    pollfd p = {pidfd_.get(), POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r > 0;
  };
  bool ended = wait(expected ? 2000 : 100);
  if (!ended) {
    syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    ended = wait(5000);
  }
  reaped_.store(true);
  return ended ? "ended (a re-adopted Sentry: its exit status went to its parent, not sandboxd)"
               : "closed its channel and could not be killed";
}

void SentryProcess::Reap(bool expected) {
  if (pidfd_.valid()) {
    const std::string reason = ReapAdopted(expected);
    std::function<void(bool, const std::string&)> on_exit;
    {
      absl::MutexLock l(&mu_);
      exited_ = true;
      exit_reason_ = reason;
      for (auto& [id, p] : pending_) {
        p->status = absl::UnavailableError(absl::StrCat("sentry (pid ", pid_, ") ", reason));
        p->done = true;
      }
      pending_.clear();
      on_exit = std::move(on_exit_);
    }
    if (on_exit) on_exit(!expected, reason);
    return;
  }
  int status = 0;
  // The Sentry gets a moment to finish on its own (2 s after Destroy; a
  // crashed one is usually gone already), so that the reason is its own;
  // anything that lingers is killed, its stubs with it.
  // Waits for the exit through a pidfd (readable once the process is a
  // zombie), so that a Sentry that exits quickly is reaped at once.
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid_, 0)));
  bool reaped = false;
  if (pidfd.valid()) {
    pollfd p = {pidfd.get(), POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, expected ? 2000 : 100);
    } while (r < 0 && errno == EINTR);
  }
  if (waitpid(pid_, &status, WNOHANG) == pid_) reaped = true;
  if (!reaped) {
    Kill();
    pid_t r;
    do {
      r = waitpid(pid_, &status, 0);
    } while (r < 0 && errno == EINTR);
    reaped = r == pid_;
  }
  // Stubs left in the group (a group's id stays taken while it has members).
  kill(-pid_, SIGKILL);
  reaped_.store(true);
  std::function<void(bool, const std::string&)> on_exit;
  std::string reason = reaped ? DescribeWaitStatus(status) : "exited";
  {
    absl::MutexLock l(&mu_);
    exited_ = true;
    // A crash report names how the process ended; a kill by our own hand
    // (Destroy, shutdown) is not a crash.
    exit_reason_ = reason;
    for (auto& [id, p] : pending_) {
      p->status = absl::UnavailableError(
          absl::StrCat("sentry (pid ", pid_, ") ", reason));
      p->done = true;
    }
    pending_.clear();
    on_exit = std::move(on_exit_);
  }
  if (on_exit) on_exit(!expected, reason);
}

}  // namespace daemon
}  // namespace sandboxd
