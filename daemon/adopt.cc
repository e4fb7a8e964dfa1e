#include "daemon/adopt.h"

#include <signal.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"
#include "sentry/socket/sandbox_net.h"
#include "google/protobuf/util/time_util.h"

namespace sandboxd {
namespace daemon {

std::vector<std::shared_ptr<Sandbox>> AdoptSandboxes(const AdoptOptions& o) {
  std::map<pid_t, SentryRecord> sentries;
  for (SentryRecord& r : o.state_dir->Sentries())
    sentries[r.pid] = std::move(r);

  std::vector<std::string> unreadable;
  std::vector<v1::SandboxInfo> records =
      o.state_dir->LoadSandboxes(&unreadable);
  for (const std::string& id : unreadable) {
    // Records are renamed into place whole: a directory without one holds
    // nothing a sandbox could be rebuilt from.
    Log("state directory: sandboxes/", id, " has no readable record (removed)");
    o.state_dir->RemoveSandbox(id);
  }

  std::vector<std::shared_ptr<Sandbox>> out;
  std::set<pid_t> keep;  // Sentries owned by a sandbox again
  for (const v1::SandboxInfo& info : records) {
    const pid_t pid = info.sentry_pids_size() > 0 ? info.sentry_pids(0) : 0;
    auto it = sentries.find(pid);
    const SentryRecord* rec = it == sentries.end() ? nullptr : &it->second;
    std::unique_ptr<SentryProcess> process;
    if (rec != nullptr && rec->Alive()) {
      absl::StatusOr<UniqueFd> ch = o.state_dir->Connect(info.id());
      absl::StatusOr<std::unique_ptr<SentryProcess>> p =
          ch.ok() ? SentryProcess::Adopt(pid, rec->start_time, std::move(*ch))
                  : absl::StatusOr<std::unique_ptr<SentryProcess>>(ch.status());
      if (p.ok()) {
        process = std::move(*p);
        keep.insert(pid);
      } else {
        // Alive but out of reach (it had not started, so it ends with its
        // channel; or it is ending): KillStale below kills it.
        process = SentryProcess::Gone(
            pid, absl::StrCat("could not be reached: ", p.status().message()));
      }
    } else {
      process = SentryProcess::Gone(
          pid,
          "was gone when sandboxd restarted (it ended while no daemon ran; "
          "its exit status went to its new parent)");
    }
    Sandbox::Options so;
    // The cgroup comes with the sandbox (its Destroy removes it) only
    // when the Sentry is back; otherwise KillStale's list has it.
    so.sentry =
        o.factory->Adopt(info.spec().platform(), std::move(process),
                         keep.count(pid) && rec != nullptr ? rec->cgroup : "");
    so.created = absl::FromUnixNanos(
        google::protobuf::util::TimeUtil::TimestampToNanoseconds(
            info.timings().created()));
    so.metrics = o.metrics;
    so.state_dir = o.state_dir;
    so.on_state_change = o.on_state_change;
    // Its pasta (NETWORK_MODE_SANDBOX) goes with it again: ended at its
    // destroy or release, or now when its Sentry did not come back.
    if (SentryRecord net = o.state_dir->LoadNetwork(info.id()); net.Alive()) {
      absl::StatusOr<sandbox_net::Pasta> pasta = sandbox_net::Pasta::Adopt(net.pid);
      if (!pasta.ok()) {
        Log("sandbox ", info.id(), ": its pasta: ", pasta.status().ToString());
      } else if (keep.count(pid)) {
        so.network = std::move(*pasta);
      } else {
        Log("sandbox ", info.id(), ": ending its pasta (pid ", net.pid,
            "): its sentry is gone");
        pasta->Stop();
        o.state_dir->ForgetNetwork(info.id());
      }
    }
    out.push_back(Sandbox::Adopt(std::move(so), info));
  }

  std::vector<std::string> stale_cgroups;
  if (int n = o.state_dir->KillStale(keep, &stale_cgroups); n > 0) {
    Log("killed ", n,
        " sentries left by an earlier sandboxd (warm or unreachable)");
  }
  if (o.cgroups != nullptr) {
    for (const std::string& name : stale_cgroups) {
      // Destroying the handle kills what is in it and removes it.
      absl::StatusOr<std::unique_ptr<Cgroup>> cg = o.cgroups->Open(name);
      if (!cg.ok() && !absl::IsNotFound(cg.status())) {
        Log("stale cgroup ", name, ": ", cg.status().ToString());
      }
    }
  }
  return out;
}

}  // namespace daemon
}  // namespace sandboxd
