// systrap's entry in the platform registry (platforms/registry.h).
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_REGISTER_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_REGISTER_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sandboxd::platform {
class Registry;
}  // namespace sandboxd::platform

namespace sandboxd::systrap {

inline constexpr absl::string_view kPlatformName = "systrap";
// The option flag of syscall patching (on|off), which sandboxd also passes
// to the Sentries of its pool.
inline constexpr absl::string_view kPatchFlag = "systrap-patch";

// Adds systrap: options --systrap-fastpath=adaptive|off|timer and
// --systrap-patch=on|off.
void RegisterPlatform(platform::Registry* registry);

// Why this host cannot patch syscalls (the conditions of
// Systrap::set_patching: FSGSBASE in user space, xsave), or "" if it can.
std::string PatchingUnavailable();

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_REGISTER_H_
