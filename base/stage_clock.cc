#include "base/stage_clock.h"

#include <time.h>

#include <array>

namespace sandboxd {
namespace {

// One entry per Stage, in the enum's order (checked by stage_clock_test).
constexpr std::array<absl::string_view, kNumStages> kNames = {
    "host_info",
    "namespaces",
    "pivot_root",
    "capabilities",
    "memory_file",
    "platform",
    "vdso",
    "spare_stub",
    "memory_file_populate",
    "vdso_calibration",
    "seccomp_filter",
    "hostname",
    "kernel",
    "filesystems",
    "load",
    "init",
    "start",
    "checkpoint.stop",
    "checkpoint.save",
    "checkpoint.write",
    "checkpoint.resume",
    "restore.check",
    "restore.read_state",
    "restore.kernel",
    "restore.load",
    "restore.start",
    "create.validate",
    "create.open_rootfs",
    "create.pool_take",
    "create.spawn_sentry",
    "create.cgroup_limits",
    "create.network",
    "create.stdio",
    "start.persist",
    "start.sentry_call",
    "attach.first_message",
    "attach.pid_sent",
    "exit.output_end_after_exited",
    "exit.status_after_output_end",
    "client.exec.open",
    "client.exec.pid",
    "client.exec.exit",
    "client.exec.finish",
    "client.t0_to_main",
    "client.main_to_call",
    "client.create_attach_run_exit",
    "client.destroy",
};
static_assert(kNames.back() == "client.destroy", "kNames follows Stage");

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

absl::string_view StageName(Stage s) {
  const int i = static_cast<int>(s);
  return i >= 0 && i < kNumStages ? kNames[i] : "unknown";
}

std::optional<Stage> StageFromName(absl::string_view name) {
  for (int i = 0; i < kNumStages; i++) {
    if (kNames[i] == name) return static_cast<Stage>(i);
  }
  return std::nullopt;
}

StageClock::StageClock() : last_ns_(MonotonicNs()) {}

void StageClock::Mark(Stage stage) {
  const int64_t now = MonotonicNs();
  stages_.push_back(StageTime{stage, static_cast<uint64_t>(now - last_ns_)});
  last_ns_ = now;
}

}  // namespace sandboxd
