// The named, timed steps of a sandbox's life, shared by every process that
// reports them: the Sentry (prewarm, Start: control.proto's StageTiming),
// the daemon (Create, Start, attach: sandbox.proto's Timings.stages) and
// sandboxctl (--timings). Each step is one Stage; StageName is its wire
// name, the string that goes into those messages and that bench/sandboxd.sh
// and the tests read, so that no process spells one differently and a
// misspelt stage does not compile.
#ifndef SANDBOXD_BASE_STAGE_CLOCK_H_
#define SANDBOXD_BASE_STAGE_CLOCK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace sandboxd {

enum class Stage : uint8_t {
  // The Sentry's prewarm (sentry/boot.cc Prewarm; the isolation steps in
  // sentry/serve.cc), in order.
  kHostInfo,
  kNamespaces,
  kPivotRoot,
  kCapabilities,
  kMemoryFile,
  kPlatform,
  kVdso,
  kSpareStub,
  kMemoryFilePopulate,
  kVdsoCalibration,
  kSeccompFilter,
  // The Sentry's Start (sentry/serve.cc, boot.cc Sandbox::Create).
  kHostname,
  kKernel,
  kFilesystems,
  kLoad,
  kInit,
  kStart,
  // The Sentry's checkpoint (sentry/boot.cc Sandbox::Checkpoint): every
  // task stopped at a safe point, the objects saved (pages copied into
  // pages.img), the files synced and the manifest written, the sandbox
  // resumed or killed.
  kCheckpointStop,
  kCheckpointSave,
  kCheckpointWrite,
  kCheckpointResume,
  // The Sentry's restore (Sandbox::Restore, Sandbox::Start): the manifest
  // and the files' checksums, state.pb read, kernel and /dev and /proc
  // built, objects loaded (memory filled from pages.img), tasks started.
  kRestoreCheck,
  kRestoreReadState,
  kRestoreKernel,
  kRestoreLoad,
  kRestoreStart,
  // The daemon's Create (daemon/service.cc).
  kCreateValidate,
  kCreateOpenRootfs,
  kCreatePoolTake,
  kCreateSpawnSentry,
  kCreateCgroupLimits,
  kCreateNetwork,  // NETWORK_MODE_SANDBOX: pasta started for the namespace
  kCreateStdio,
  // The daemon's Start: Persist (the sandbox outlives the daemon), then
  // its call to the Sentry, whose own steps follow as kSentryStagePrefix +
  // the Sentry's stage name.
  kStartPersist,
  kStartSentryCall,
  // The daemon's attach and the exit's way back (daemon/service.cc).
  kAttachFirstMessage,
  kAttachPidSent,
  kExitOutputEndAfterExited,
  kExitStatusAfterOutputEnd,
  // The client's Exec call (client/client.cc, ExecTrace.steps).
  kClientExecOpen,
  kClientExecPid,
  kClientExecExit,
  kClientExecFinish,
  // sandboxctl run --timings (client/sandboxctl/run.cc).
  kClientT0ToMain,
  kClientMainToCall,
  kClientCreateAttachRunExit,
  kClientDestroy,
};
inline constexpr int kNumStages = static_cast<int>(Stage::kClientDestroy) + 1;

// The daemon names the Sentry's steps of a Start with this prefix
// ("start.sentry.kernel").
inline constexpr absl::string_view kSentryStagePrefix = "start.sentry.";

// The wire name: "vdso_calibration", "create.pool_take", "client.exec.pid".
absl::string_view StageName(Stage s);
// The stage whose wire name is `name`.
std::optional<Stage> StageFromName(absl::string_view name);

struct StageTime {
  Stage stage;
  uint64_t nanos = 0;
};

// Records consecutive steps: each Mark closes the step that began at the
// previous Mark (or at construction). Not thread-safe: one owner.
class StageClock {
 public:
  StageClock();
  void Mark(Stage stage);
  const std::vector<StageTime>& stages() const { return stages_; }

 private:
  int64_t last_ns_;
  std::vector<StageTime> stages_;
};

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_STAGE_CLOCK_H_
