// Warm Sentries: spawned ahead of need (`sentry serve`, prewarmed, Hello
// received), a target number per platform, refilled by a background thread.
// Create takes one; on a miss it spawns one on the spot.
//
// Each Sentry gets its own cgroup when the daemon has cgroups, joined in
// the child before exec (so that everything the Sentry forks is inside);
// the sandbox's limits are set on it at Create.
//
// The refill starts a Sentry the moment one is taken, that is while the
// taker's sandbox starts and runs: on a small machine its prewarm (tens of
// milliseconds of CPU) would take the CPU that sandbox is waiting for. So
// refills prewarm in the background: the lowest CPU weight in their cgroup
// and (as root) nice 19, until Take gives the Sentry the normal ones back.
//
// Lock order: Pool::mu_ is a leaf.
#ifndef SANDBOXD_DAEMON_POOL_H_
#define SANDBOXD_DAEMON_POOL_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/cgroup.h"
#include "daemon/metrics.h"
#include "daemon/sentry_kind.h"
#include "daemon/sentry_process.h"
#include "daemon/state_dir.h"

namespace sandboxd {
namespace daemon {

// A Sentry that has said Hello, with its cgroup. Destroying it kills the
// Sentry (if it still runs), removes its cgroup and its state-dir record.
class WarmSentry {
 public:
  ~WarmSentry();
  SentryProcess& process() { return *process_; }
  Cgroup* cgroup() { return cgroup_.get(); }  // null without cgroups
  const std::string& platform() const { return platform_; }
  absl::Duration spawn_time() const { return spawn_time_; }
  // Gives a Sentry spawned in the background the normal CPU weight and
  // nice value (all of its threads and stub processes).
  absl::Status Foreground();
  // The Sentry has Persist's socket already, at the state directory's
  // sockets/<pid> (done while prewarming, so that a create needs only a
  // rename; control.proto Start.keep_fds brings the rest).
  bool has_socket() const { return has_socket_; }

 private:
  friend class SentryFactory;
  WarmSentry() = default;

  std::string platform_;
  absl::Duration spawn_time_;
  bool background_ = false;
  bool has_socket_ = false;
  StateDir* state_dir_ = nullptr;
  std::unique_ptr<Cgroup> cgroup_;  // destroyed after the process
  std::unique_ptr<SentryProcess> process_;
};

class SentryFactory {
 public:
  // A short random tag for this daemon's life.
  static std::string InstanceTag();

  // `cgroups` may be null (no limits); `state_dir` outlives the factory.
  SentryFactory(std::string sentry_path, CgroupManager* cgroups, StateDir* state_dir,
                absl::Duration hello_timeout = absl::Seconds(30))
      : sentry_path_(std::move(sentry_path)),
        cgroups_(cgroups),
        state_dir_(state_dir),
        hello_timeout_(hello_timeout),
        instance_(InstanceTag()) {}

  // Spawns a Sentry for `platform` (a SentryKind key: "systrap+patch"
  // adds --systrap-patch=on) and waits for its Hello. With
  // `background`, at the lowest CPU priority (see WarmSentry::Foreground),
  // and with Persist's socket (WarmSentry::has_socket) when there is a
  // state directory.
  // `netns_fd` (not -1): the Sentry starts in that network namespace
  // (SentrySpawnOptions::netns_fd); the caller keeps it open.
  absl::StatusOr<std::unique_ptr<WarmSentry>> Spawn(const std::string& platform,
                                                    bool background = false,
                                                    int netns_fd = -1);

  // A Sentry of an earlier daemon, recorded in the state directory:
  // `process` (adopted, or Gone) with the cgroup `cgroup_name` (opened
  // when it exists; "" for none). Destroying it kills and removes them.
  std::unique_ptr<WarmSentry> Adopt(const std::string& platform,
                                    std::unique_ptr<SentryProcess> process,
                                    const std::string& cgroup_name);

  bool has_cgroups() const { return cgroups_ != nullptr; }

 private:
  const std::string sentry_path_;
  CgroupManager* const cgroups_;
  StateDir* const state_dir_;
  const absl::Duration hello_timeout_;
  // In each cgroup's name, so that no two daemon lives pick the same one
  // (re-adopted Sentries keep theirs).
  const std::string instance_;
  absl::Mutex mu_;
  uint64_t next_cgroup_ ABSL_GUARDED_BY(mu_) = 0;
};

class Pool {
 public:
  // `targets`: warm Sentries to keep per platform (0: none, every Create
  // spawns). `metrics` may be null.
  Pool(SentryFactory* factory, Metrics* metrics, std::map<std::string, int> targets);
  ~Pool();  // stops refilling and kills the idle Sentries

  // Starts the refill thread.
  void Start();

  // A warm Sentry of `platform` (*hit = true), or one spawned now.
  absl::StatusOr<std::unique_ptr<WarmSentry>> Take(const std::string& platform, bool* hit);
  // A Sentry of `platform` (a "+hostnet" kind) spawned now in the network
  // namespace `netns_fd`: a warm one has made its own namespace already
  // and keeps no capability to enter another (SandboxSpec.network_namespace).
  absl::StatusOr<std::unique_ptr<WarmSentry>> SpawnIn(const std::string& platform,
                                                      int netns_fd);

  // Idle Sentries of `platform` right now.
  int Idle(const std::string& platform);

 private:
  void RefillLoop();
  // A platform below its target, or "" when every one is full.
  std::string NeedsRefillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SentryFactory* const factory_;
  Metrics* const metrics_;
  const std::map<std::string, int> targets_;

  absl::Mutex mu_;
  std::map<std::string, std::deque<std::unique_ptr<WarmSentry>>> idle_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread refill_;
  friend class Sandbox;  // names mu_ in its lock order annotation
};

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_POOL_H_
