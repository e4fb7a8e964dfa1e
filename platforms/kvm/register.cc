#include "platforms/kvm/register.h"

#include <memory>
#include <string>
#include <utility>

#include "platforms/kvm/kvm_platform.h"
#include "platforms/kvm/probe.h"
#include "platforms/kvm/vm.h"
#include "platforms/registry.h"

namespace sandboxd::kvm {
namespace {

constexpr absl::string_view kPoolFlag = "kvm-vcpu-pool";
constexpr absl::string_view kShadowFlag = "kvm-shadow";
constexpr absl::string_view kFpuFlag = "kvm-fpu";

// The options as KvmOptions; each value was checked by its flag.
absl::StatusOr<KvmOptions> OptionsFrom(const platform::OptionValues& values) {
  KvmOptions o;
  for (const auto& [name, v] : values) {
    if (name == kPoolFlag) {
      absl::StatusOr<PoolMode> m = ParsePoolMode(v);
      if (!m.ok()) return m.status();
      o.pool_mode = *m;
    } else if (name == kShadowFlag) {
      if (absl::Status s = ParseShadowMode(v, &o); !s.ok()) return s;
    } else if (name == kFpuFlag) {
      if (absl::Status s = ParseFpuMode(v, &o); !s.ok()) return s;
    }
  }
  return o;
}

}  // namespace

void RegisterPlatform(platform::Registry* registry) {
  platform::Backend b;
  b.name = std::string(kPlatformName);
  b.description =
      "user mode of a KVM guest (hardware or PVM), where its probe passes";
  b.probe = [] { return RunProbe(20).status(); };
  b.flags.push_back(platform::OptionFlag{
      std::string(kPoolFlag), "background|eager", "background",
      "when the vCPU pool is made: while prewarming, or on the start path "
      "(for benchmarks)",
      [](absl::string_view v) { return ParsePoolMode(v).status(); }});
  b.flags.push_back(platform::OptionFlag{
      std::string(kShadowFlag), "zap|flush", "zap",
      "zap stale shadow entries, or flush the whole shadow MMU (for A/B "
      "benchmarks)",
      [](absl::string_view v) {
        KvmOptions o;
        return ParseShadowMode(v, &o);
      }});
  b.flags.push_back(platform::OptionFlag{
      std::string(kFpuFlag), "lazy|eager", "lazy",
      "keep the FPU state in the vCPU between switches, or load and save it "
      "on each (for A/B benchmarks)",
      [](absl::string_view v) {
        KvmOptions o;
        return ParseFpuMode(v, &o);
      }});
  b.preopen = PreopenKvm;
  b.create = [](const platform::CreateArgs& args,
                const platform::OptionValues& values)
      -> absl::StatusOr<std::unique_ptr<platform::Platform>> {
    absl::StatusOr<KvmOptions> o = OptionsFrom(values);
    if (!o.ok()) return o.status();
    absl::StatusOr<std::unique_ptr<KvmPlatform>> p =
        KvmPlatform::Create(args.memfile_fd, args.memfile_max, *o);
    if (!p.ok()) return p.status();
    return std::unique_ptr<platform::Platform>(std::move(*p));
  };
  registry->Add(std::move(b));
}

}  // namespace sandboxd::kvm
