#include "daemon/sentry_kind.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "platforms/systrap/register.h"

namespace sandboxd {
namespace daemon {
namespace {

constexpr absl::string_view kPatchSuffix = "+patch";
constexpr absl::string_view kHostNetSuffix = "+hostnet";

}  // namespace

std::string SentryKind::Key() const {
  return absl::StrCat(platform, systrap_patch ? kPatchSuffix : "",
                      host_network ? kHostNetSuffix : "");
}

SentryKind SentryKind::FromKey(absl::string_view key) {
  SentryKind k;
  k.host_network = absl::ConsumeSuffix(&key, kHostNetSuffix);
  k.systrap_patch = absl::ConsumeSuffix(&key, kPatchSuffix);
  k.platform = std::string(key);
  return k;
}

std::vector<std::string> SentryKind::ServeFlags() const {
  std::vector<std::string> flags;
  if (systrap_patch) {
    flags.push_back(absl::StrCat("--", systrap::kPatchFlag, "=on"));
  }
  if (host_network) flags.push_back("--network=host");
  return flags;
}

std::string SystrapPatchUnavailable() { return systrap::PatchingUnavailable(); }

absl::StatusOr<SentryKind> KindForSpec(const v1::SandboxSpec& spec,
                                       bool default_patch) {
  SentryKind k;
  k.platform = spec.platform();
  // A namespace by path: the Sentry uses the one it is started in.
  k.host_network =
      spec.network() == v1::NETWORK_MODE_HOST || !spec.network_namespace().empty();
  const v1::SystrapPatch patch = spec.systrap().patch();
  if (!v1::SystrapPatch_IsValid(patch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.systrap.patch: unknown value ", patch));
  }
  if (k.platform != systrap::kPlatformName) {
    if (patch == v1::SYSTRAP_PATCH_ON) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.systrap.patch: syscall patching is a systrap option; this "
          "sandbox's platform is ", k.platform));
    }
    return k;
  }
  k.systrap_patch = patch == v1::SYSTRAP_PATCH_DEFAULT
                        ? default_patch
                        : patch == v1::SYSTRAP_PATCH_ON;
  if (k.systrap_patch) {
    if (std::string why = SystrapPatchUnavailable(); !why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spec.systrap.patch: syscall patching is not available on this "
          "host: ", why));
    }
  }
  return k;
}

}  // namespace daemon
}  // namespace sandboxd
