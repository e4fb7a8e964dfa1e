// The gRPC service sandboxd.v1.Sandboxes (proto/sandbox.proto): request
// validation, the table of sandboxes, and the streaming calls (Exec, Logs).
//
// Thread safety: gRPC calls the methods from its own threads, concurrently.
// Lock order: Service::mu_ > Sandbox::mu_.
#ifndef SANDBOXD_DAEMON_SERVICE_H_
#define SANDBOXD_DAEMON_SERVICE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/metrics.h"
#include "daemon/pool.h"
#include "daemon/sandbox.h"
#include "daemon/spec_policy.h"
#include "platforms/registry.h"
#include "proto/sandbox.grpc.pb.h"

namespace sandboxd {
namespace daemon {

struct ServiceOptions {
  // Platforms this daemon offers (names from platforms/registry.h).
  std::set<std::string> platforms = {platform::Registry::Get().DefaultName()};
  // sandboxd --systrap-patch: the pool's systrap Sentries patch syscalls,
  // and so does a Create that does not say (spec.systrap.patch).
  bool systrap_patch = false;
  int max_sandboxes = 1000;
  // Default rootfs and limits, allowed roots, accepted ranges.
  SpecPolicy policy;
  // How often usage and unimplemented syscalls are collected for metrics.
  absl::Duration metrics_interval = absl::Seconds(5);
  // Where sandboxes are recorded so that a restarted daemon re-adopts
  // them (may be null: they die with the daemon).
  StateDir* state_dir = nullptr;
  // sandboxd --restore-rate: the page loader's rate limit of every restore
  // (bytes/s, 0: none), for tests and benchmarks that model a network disk.
  uint64_t restore_rate = 0;
};

class Service final : public v1::Sandboxes::Service {
 public:
  // `pool` and `metrics` (may be null) outlive the service.
  Service(ServiceOptions options, Pool* pool, Metrics* metrics, bool have_cgroups);
  ~Service() override;  // DestroyAll()

  // Destroys every sandbox (at shutdown).
  void DestroyAll();
  // Asked first by every method: a call it refuses fails with its status
  // and does nothing (auth.h, Listener::CheckCall: calls that came over
  // TCP must carry the bearer token). Set before the server starts.
  using CallCheck = std::function<grpc::Status(const grpc::ServerContext&)>;
  void SetCallCheck(CallCheck check) { call_check_ = std::move(check); }
  // Puts back the sandboxes an earlier daemon recorded (adopt.h); before
  // the service takes calls.
  void Readopt(SentryFactory* factory, CgroupManager* cgroups);

  grpc::Status Create(grpc::ServerContext*, const v1::CreateRequest*,
                      v1::CreateResponse*) override;
  grpc::Status Start(grpc::ServerContext*, const v1::StartRequest*,
                     v1::StartResponse*) override;
  grpc::Status Exec(grpc::ServerContext*,
                    grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>*) override;
  grpc::Status Wait(grpc::ServerContext*, const v1::WaitRequest*, v1::WaitResponse*) override;
  grpc::Status Signal(grpc::ServerContext*, const v1::SignalRequest*,
                      v1::SignalResponse*) override;
  grpc::Status Update(grpc::ServerContext*, const v1::UpdateRequest*,
                      v1::UpdateResponse*) override;
  grpc::Status Pause(grpc::ServerContext*, const v1::PauseRequest*,
                     v1::PauseResponse*) override;
  grpc::Status Resume(grpc::ServerContext*, const v1::ResumeRequest*,
                      v1::ResumeResponse*) override;
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest*,
                          v1::CheckpointResponse*) override;
  grpc::Status Restore(grpc::ServerContext*, const v1::RestoreRequest*,
                       v1::RestoreResponse*) override;
  grpc::Status Destroy(grpc::ServerContext*, const v1::DestroyRequest*,
                       v1::DestroyResponse*) override;
  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*, v1::ListResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest*, v1::GetResponse*) override;
  grpc::Status Logs(grpc::ServerContext*, const v1::LogsRequest*,
                    grpc::ServerWriter<v1::LogsResponse>*) override;
  grpc::Status Capabilities(grpc::ServerContext*, const v1::CapabilitiesRequest*,
                            v1::CapabilitiesResponse*) override;

 private:
  grpc::Status CheckCall(const grpc::ServerContext& ctx) const {
    return call_check_ ? call_check_(ctx) : grpc::Status::OK;
  }

  absl::StatusOr<std::shared_ptr<Sandbox>> Find(const std::string& id);
  // Create's work. With `image` (a Restore's image directory, which the
  // sandbox's start restores instead of starting `req.spec`'s program),
  // `image_path` names it and `begin` is the Restore call's start.
  absl::Status CreateSandbox(const v1::CreateRequest& req, v1::CreateResponse* resp,
                             UniqueFd image = UniqueFd(),
                             const std::string& image_path = "",
                             std::vector<std::pair<std::string, absl::Duration>>
                                 restore_stages = {});
  absl::Status RestoreSandbox(const v1::RestoreRequest& req, v1::RestoreResponse* resp);
  absl::Status CheckpointSandbox(const v1::CheckpointRequest& req,
                                 v1::CheckpointResponse* resp);
  absl::Status ExecStream(grpc::ServerContext* ctx,
                          grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>* stream);
  void UpdateStateMetrics();
  void MetricsLoop();
  // Exec's Start.remove: takes `sandbox` out of the table now (unless a
  // Destroy got there first) and has the reaper destroy it.
  void Remove(const std::shared_ptr<Sandbox>& sandbox);
  // The reaper thread: destroys removed sandboxes off their callers' path.
  void ReapLoop();

  const ServiceOptions options_;
  CallCheck call_check_;
  Pool* const pool_;
  Metrics* const metrics_;
  const bool have_cgroups_;

  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(Sandbox::mu_);
  // A null entry is an id being created (reserved, counted in the limit).
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Removed from the table, waiting for the reaper.
  std::vector<std::shared_ptr<Sandbox>> doomed_ ABSL_GUARDED_BY(mu_);
  std::thread metrics_thread_;
  std::thread reaper_;
};

// absl::Status -> grpc::Status (the codes share their numbers).
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_SERVICE_H_
