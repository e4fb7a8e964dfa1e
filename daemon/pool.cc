#include "daemon/pool.h"

#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "daemon/log.h"

namespace sandboxd {
namespace daemon {

WarmSentry::~WarmSentry() {
  const pid_t pid = process_ ? process_->pid() : 0;
  if (process_) process_->ExpectExit();
  process_.reset();  // kills and reaps
  cgroup_.reset();   // kills what is left in the cgroup, removes it
  if (state_dir_ != nullptr && pid > 0) state_dir_->Forget(pid);
}

namespace {

// A background Sentry's nice value (the lowest priority).
constexpr int kBackgroundNice = 19;

// Whether this daemon may raise a nice value again (CAP_SYS_NICE over the
// host's tasks): root in the initial user namespace. Root of a namespace of
// its own may lower a Sentry's priority but never raise it back, so there a
// warm Sentry is not lowered at all: its Foreground would fail with EACCES.
bool MayRaiseNice() {
  static const bool may = [] {
    if (geteuid() != 0) return false;
    absl::StatusOr<std::string> map = ReadWholeFile("/proc/self/uid_map");
    if (!map.ok()) return false;
    std::vector<std::string> f = absl::StrSplit(*map, ' ', absl::SkipEmpty());
    // The initial namespace maps every id onto itself: "0 0 4294967295".
    return f.size() == 3 && f[0] == "0" && f[1] == "0" &&
           absl::StripAsciiWhitespace(f[2]) == "4294967295";
  }();
  return may;
}

}  // namespace

absl::Status WarmSentry::Foreground() {
  if (!background_) return absl::OkStatus();
  background_ = false;
  if (cgroup_ != nullptr) RETURN_IF_ERROR(cgroup_->SetCpuWeight(kCpuWeightDefault));
  // The Sentry leads its process group, which holds its stubs: every
  // thread of every one of them.
  if (MayRaiseNice() && setpriority(PRIO_PGRP, static_cast<id_t>(process_->pid()), 0) != 0) {
    return ErrnoStatus(absl::StrCat("sentry (pid ", process_->pid(), "): setpriority"), errno);
  }
  return absl::OkStatus();
}

std::string SentryFactory::InstanceTag() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(rd() & 0xffffff, absl::kZeroPad6));
}

std::unique_ptr<WarmSentry> SentryFactory::Adopt(const std::string& platform,
                                                 std::unique_ptr<SentryProcess> process,
                                                 const std::string& cgroup_name) {
  auto warm = std::unique_ptr<WarmSentry>(new WarmSentry());
  warm->platform_ = SentryKind::FromKey(platform).platform;
  warm->state_dir_ = state_dir_;
  if (cgroups_ != nullptr && !cgroup_name.empty()) {
    absl::StatusOr<std::unique_ptr<Cgroup>> cg = cgroups_->Open(cgroup_name);
    if (cg.ok()) {
      warm->cgroup_ = std::move(*cg);
    } else {
      Log("re-adopting sentry (pid ", process->pid(), "): ", cg.status().ToString());
    }
  }
  warm->process_ = std::move(process);
  return warm;
}

absl::StatusOr<std::unique_ptr<WarmSentry>> SentryFactory::Spawn(const std::string& platform,
                                                                 bool background,
                                                                 int netns_fd) {
  const absl::Time begin = absl::Now();
  auto warm = std::unique_ptr<WarmSentry>(new WarmSentry());
  // `platform` is a pool key: the platform and its start-time options.
  const SentryKind kind = SentryKind::FromKey(platform);
  warm->platform_ = kind.platform;
  warm->state_dir_ = state_dir_;
  if (cgroups_ != nullptr) {
    uint64_t n;
    {
      absl::MutexLock l(&mu_);
      n = next_cgroup_++;
    }
    ASSIGN_OR_RETURN(warm->cgroup_,
                     cgroups_->New(absl::StrCat("sentry-", instance_, "-", n)));
    if (background) RETURN_IF_ERROR(warm->cgroup_->SetCpuWeight(kCpuWeightIdle));
  }
  warm->background_ = background;
  SentrySpawnOptions o;
  o.sentry_path = sentry_path_;
  o.platform = kind.platform;
  o.flags = kind.ServeFlags();
  o.netns_fd = netns_fd;
  Cgroup* cg = warm->cgroup_.get();
  StateDir* sd = state_dir_;
  o.before_exec = [cg, sd, background](pid_t pid) -> absl::Status {
    // Recorded first: if the daemon dies from here on, its successor finds
    // the pid and the cgroup.
    RETURN_IF_ERROR(sd->Record(pid, cg != nullptr ? cg->name() : ""));
    if (cg != nullptr) RETURN_IF_ERROR(Annotate(cg->AddProcess(pid), "joining its cgroup"));
    // Before exec, while the child is one thread: all it starts inherits
    // it. Only when raising it back at Take is allowed.
    if (background && MayRaiseNice() &&
        setpriority(PRIO_PROCESS, static_cast<id_t>(pid), kBackgroundNice) != 0) {
      return ErrnoStatus("setpriority", errno);
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<SentryProcess>> p = SentryProcess::Spawn(o);
  if (!p.ok()) return p.status();
  warm->process_ = std::move(*p);
  RETURN_IF_ERROR(Annotate(warm->process_->AwaitHello(hello_timeout_),
                           absl::StrCat("starting a ", platform, " sentry")));
  if (background && state_dir_ != nullptr) {
    // Off the create's path: the socket the sandbox outlives the daemon
    // with. Without it the create sends Persist itself.
    const pid_t pid = warm->process_->pid();
    absl::StatusOr<UniqueFd> listener = state_dir_->ListenWarm(pid);
    absl::Status s = listener.status();
    if (s.ok()) {
      control::Request req;
      req.mutable_persist();
      const int fds[] = {listener->get()};
      s = warm->process_->Call(req, fds, absl::Seconds(10)).status();
    }
    if (s.ok()) {
      warm->has_socket_ = true;
    } else {
      Log("pool: sentry (pid ", pid, "): its Persist socket: ", s.ToString());
    }
  }
  warm->spawn_time_ = absl::Now() - begin;
  return warm;
}

Pool::Pool(SentryFactory* factory, Metrics* metrics, std::map<std::string, int> targets)
    : factory_(factory), metrics_(metrics), targets_(std::move(targets)) {}

Pool::~Pool() {
  std::map<std::string, std::deque<std::unique_ptr<WarmSentry>>> idle;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    idle.swap(idle_);
  }
  if (refill_.joinable()) refill_.join();
  // `idle` dies here, and with it the Sentries.
}

void Pool::Start() {
  refill_ = std::thread([this] { RefillLoop(); });
}

int Pool::Idle(const std::string& platform) {
  absl::MutexLock l(&mu_);
  auto it = idle_.find(platform);
  return it == idle_.end() ? 0 : static_cast<int>(it->second.size());
}

std::string Pool::NeedsRefillLocked() {
  for (const auto& [platform, target] : targets_) {
    if (static_cast<int>(idle_[platform].size()) < target) return platform;
  }
  return "";
}

void Pool::RefillLoop() {
  absl::Duration backoff = absl::ZeroDuration();
  for (;;) {
    std::string platform;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !NeedsRefillLocked().empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      platform = NeedsRefillLocked();
    }
    absl::StatusOr<std::unique_ptr<WarmSentry>> warm =
        factory_->Spawn(platform, /*background=*/true);
    if (!warm.ok()) {
      // A platform that cannot start (no KVM, a broken binary) must not
      // spin: wait a little longer after each failure, up to 10 s.
      backoff = std::min(absl::Seconds(10), backoff * 2 + absl::Milliseconds(100));
      Log("pool: ", warm.status().ToString(), " (retrying in ",
          absl::FormatDuration(backoff), ")");
      absl::MutexLock l(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff);
      continue;
    }
    backoff = absl::ZeroDuration();
    if (metrics_ != nullptr) metrics_->ObservePoolRefill(platform, (*warm)->spawn_time());
    absl::MutexLock l(&mu_);
    if (stopping_) return;  // *warm dies here
    idle_[platform].push_back(std::move(*warm));
    if (metrics_ != nullptr) metrics_->SetPoolSize(platform, idle_[platform].size());
  }
}

absl::StatusOr<std::unique_ptr<WarmSentry>> Pool::Take(const std::string& platform,
                                                       bool* hit) {
  std::unique_ptr<WarmSentry> dead;  // destroyed outside the lock
  std::unique_ptr<WarmSentry> w;
  {
    absl::MutexLock l(&mu_);
    auto& q = idle_[platform];
    while (!q.empty() && w == nullptr) {
      w = std::move(q.front());
      q.pop_front();
      if (w->process().exited()) {
        dead = std::move(w);  // died while idle; the refill replaces it
        continue;
      }
      if (metrics_ != nullptr) metrics_->SetPoolSize(platform, q.size());
    }
  }
  if (w != nullptr) {
    *hit = true;
    // Slower, not broken, if it fails: the sandbox still runs.
    if (absl::Status s = w->Foreground(); !s.ok()) Log("pool: ", s.ToString());
    return w;
  }
  *hit = false;
  return factory_->Spawn(platform);
}

absl::StatusOr<std::unique_ptr<WarmSentry>> Pool::SpawnIn(const std::string& platform,
                                                         int netns_fd) {
  return factory_->Spawn(platform, /*background=*/false, netns_fd);
}

}  // namespace daemon
}  // namespace sandboxd
