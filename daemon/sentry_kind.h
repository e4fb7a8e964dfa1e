// What a Sentry is started for: its platform, the platform options that
// are fixed when `sentry serve` starts (today systrap's syscall patching)
// and whether it runs in the daemon's network namespace (NETWORK_MODE_HOST).
// The pool keeps warm Sentries per kind: a Create whose spec asks for
// another kind than the pool's is a pool miss and starts one on the spot.
#ifndef SANDBOXD_DAEMON_SENTRY_KIND_H_
#define SANDBOXD_DAEMON_SENTRY_KIND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platforms/systrap/register.h"
#include "proto/sandbox.pb.h"

namespace sandboxd {
namespace daemon {

struct SentryKind {
  std::string platform = std::string(systrap::kPlatformName);  // registry.h
  bool systrap_patch = false;        // sentry serve --systrap-patch=on
  bool host_network = false;         // sentry serve --network=host

  // The pool's key: the platform, with "+patch" when patching is on and
  // "+hostnet" for the host's network ("systrap", "systrap+patch",
  // "kvm+hostnet"). FromKey(k.Key()) == k.
  std::string Key() const;
  static SentryKind FromKey(absl::string_view key);
  // `sentry serve` flags beyond --platform.
  std::vector<std::string> ServeFlags() const;
  bool operator==(const SentryKind& o) const {
    return platform == o.platform && systrap_patch == o.systrap_patch &&
           host_network == o.host_network;
  }
};

// Why this host cannot patch syscalls, or "" if it can
// (systrap::PatchingUnavailable).
std::string SystrapPatchUnavailable();

// The kind a Create with `spec` (platform already validated and filled in)
// needs; `default_patch` is the daemon's --systrap-patch. INVALID_ARGUMENT
// for patching asked of another platform or an unknown value,
// FAILED_PRECONDITION when this host cannot patch; both name
// spec.systrap.patch.
absl::StatusOr<SentryKind> KindForSpec(const v1::SandboxSpec& spec,
                                       bool default_patch);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_SENTRY_KIND_H_
