#include "daemon/sentry_kind.h"

#include <cpuid.h>
#include <sys/auxv.h>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"

namespace sandboxd {
namespace daemon {
namespace {

constexpr absl::string_view kPatchSuffix = "+patch";

}  // namespace

std::string SentryKind::Key() const {
  return systrap_patch ? absl::StrCat(platform, kPatchSuffix) : platform;
}

SentryKind SentryKind::FromKey(absl::string_view key) {
  SentryKind k;
  k.systrap_patch = absl::ConsumeSuffix(&key, kPatchSuffix);
  k.platform = std::string(key);
  return k;
}

std::vector<std::string> SentryKind::ServeFlags() const {
  if (systrap_patch) return {"--systrap-patch=on"};
  return {};
}

std::string SystrapPatchUnavailable() {
  if ((getauxval(AT_HWCAP2) & 2 /* HWCAP2_FSGSBASE */) == 0) {
    return "the CPU or kernel does not offer FSGSBASE to user space";
  }
  unsigned a, b, c, d;
  __cpuid(1, a, b, c, d);
  if ((c & bit_OSXSAVE) == 0) return "the kernel does not enable xsave";
  return "";
}

absl::StatusOr<SentryKind> KindForSpec(const v1::SandboxSpec& spec,
                                       bool default_patch) {
  SentryKind k;
  k.platform = spec.platform();
  const v1::SystrapPatch patch = spec.systrap().patch();
  if (!v1::SystrapPatch_IsValid(patch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.systrap.patch: unknown value ", patch));
  }
  if (k.platform != "systrap") {
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
