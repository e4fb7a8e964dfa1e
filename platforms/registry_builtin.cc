// Registry::Get(): the table of the back-ends linked into the program. In
// a library of its own (sbx_platform_registry), above the back-ends, which
// register themselves with the rest of registry.h (sbx_platform).
#include "platforms/kvm/register.h"
#include "platforms/registry.h"
#include "platforms/systrap/register.h"

namespace sandboxd::platform {

const Registry& Registry::Get() {
  // The table of back-ends: one call each, in the order of --help (the
  // first is the default).
  static const Registry* registry = [] {
    auto* r = new Registry();
    systrap::RegisterPlatform(r);
    kvm::RegisterPlatform(r);
    return r;
  }();
  return *registry;
}

}  // namespace sandboxd::platform
