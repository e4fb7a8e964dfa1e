#include "platforms/systrap/register.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platforms/registry.h"
#include "platforms/systrap/fastpath.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {
namespace {

constexpr absl::string_view kFastPathFlag = "systrap-fastpath";

absl::Status CheckOnOff(absl::string_view flag, absl::string_view v) {
  if (v == "on" || v == "off") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " wants on or off, got: ", v));
}

absl::StatusOr<std::unique_ptr<platform::Platform>> Create(
    const platform::CreateArgs& args, const platform::OptionValues& options) {
  FastPathMode fastpath = FastPathMode::kAdaptive;
  if (auto it = options.find(std::string(kFastPathFlag)); it != options.end()) {
    absl::StatusOr<FastPathMode> m = ParseFastPathMode(it->second);
    if (!m.ok()) return m.status();
    fastpath = *m;
  }
  absl::StatusOr<std::unique_ptr<Systrap>> p =
      Systrap::Create(args.memfile_fd, fastpath);
  if (!p.ok()) return p.status();
  if (auto it = options.find(std::string(kPatchFlag));
      it != options.end() && it->second == "on") {
    std::string why;
    if (!(*p)->set_patching(true, &why)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--", kPatchFlag, "=on: syscall patching is not available: ", why));
    }
  }
  return std::unique_ptr<platform::Platform>(std::move(*p));
}

}  // namespace

void RegisterPlatform(platform::Registry* registry) {
  platform::Backend b;
  b.name = std::string(kPlatformName);
  b.description =
      "stub processes trapped by seccomp, state handed over in shared memory "
      "(works everywhere)";
  // Stub processes, seccomp and shared memory are what any Linux the
  // Sentry runs on has.
  b.probe = [] { return absl::OkStatus(); };
  b.flags.push_back(platform::OptionFlag{
      std::string(kFastPathFlag), "adaptive|off|timer", "adaptive",
      "how hand-over waiters decide to spin; off and timer are for "
      "benchmarks",
      [](absl::string_view v) { return ParseFastPathMode(v).status(); }});
  b.flags.push_back(platform::OptionFlag{
      std::string(kPatchFlag), "on|off", "off",
      "patch hot syscall sites to enter the stub without a signal",
      [](absl::string_view v) { return CheckOnOff(kPatchFlag, v); },
      /*ignored_elsewhere=*/false});
  b.init_process = ReserveStubWindow;
  b.create = Create;
  registry->Add(std::move(b));
}

}  // namespace sandboxd::systrap
