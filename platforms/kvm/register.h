// kvm's entry in the platform registry (platforms/registry.h).
#ifndef SANDBOXD_PLATFORMS_KVM_REGISTER_H_
#define SANDBOXD_PLATFORMS_KVM_REGISTER_H_

#include "absl/strings/string_view.h"

namespace sandboxd::platform {
class Registry;
}  // namespace sandboxd::platform

namespace sandboxd::kvm {

inline constexpr absl::string_view kPlatformName = "kvm";

// Adds kvm: its probe (a real guest round trip, probe.h) and the options
// --kvm-vcpu-pool=background|eager, --kvm-shadow=zap|flush and
// --kvm-fpu=lazy|eager.
void RegisterPlatform(platform::Registry* registry);

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_REGISTER_H_
