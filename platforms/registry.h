// The platform back-ends this program has, by name: what `sentry run`,
// `sentry serve` and sandboxd ask when a platform is named (--platform,
// --platforms, a spec's platform), when they list the choices (errors,
// --help), and to create one.
//
// Each back-end describes itself in a Backend (its folder's register.cc):
// its name, a probe of the host, its option flags and its factory.
// Registry::Get() holds every back-end, added by one explicit call per
// back-end (registry_builtin.cc, library sbx_platform_registry), not by
// static initialisers, which a static library drops when nothing refers to
// their object file.
//
// Thread-safety: Get() builds the registry once; it is immutable after.
#ifndef SANDBOXD_PLATFORMS_REGISTRY_H_
#define SANDBOXD_PLATFORMS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platforms/platform.h"

namespace sandboxd::platform {

// What every back-end is created with.
struct CreateArgs {
  int memfile_fd = -1;       // the sandbox's memory file
  uint64_t memfile_max = 0;  // the most it ever grows to
};

// A back-end's option values by flag name ("systrap-fastpath" -> "timer").
// A flag not set has no entry: the back-end's default.
using OptionValues = std::map<std::string, std::string>;

// One option of a back-end, given to the Sentry as --NAME=VALUE.
struct OptionFlag {
  std::string name;           // "systrap-fastpath"
  std::string values;         // the choices, for --help: "adaptive|off|timer"
  std::string default_value;  // what an unset flag means
  std::string help;           // one sentence
  // OK, or InvalidArgument saying what the flag wants.
  std::function<absl::Status(absl::string_view value)> check;
  // Given to a Sentry of another platform: ignored when true (a tuning,
  // which a wrapper may pass to every Sentry); when false an error unless
  // it is the default (it asks for a feature, as --systrap-patch=on does).
  bool ignored_elsewhere = true;
};

struct Backend {
  std::string name;         // "systrap", "kvm"
  std::string description;  // one line, for --help
  // Whether the back-end can run on this host: OK, or one line saying why
  // not. May cost what creating the platform costs (kvm runs a guest).
  std::function<absl::Status()> probe;
  std::vector<OptionFlag> flags;
  // Runs first thing in main, before anything maps large ranges or starts
  // threads (systrap reserves the stub window, so that stubs forked later
  // can map it at its fixed address). Null: nothing.
  std::function<absl::Status()> init_process;
  // Opens the host resources the back-end needs (kvm: /dev/kvm) while the
  // host's paths are still there, before the Sentry isolates itself. Null:
  // nothing to open.
  std::function<absl::Status()> preopen;
  // Makes the platform; must run while the calling process has one thread
  // (systrap forks its stub template). `options` were checked by `flags`.
  std::function<absl::StatusOr<std::unique_ptr<Platform>>(
      const CreateArgs& args, const OptionValues& options)>
      create;

  // The flag called `name`, or null.
  const OptionFlag* FindFlag(absl::string_view name) const;
  // Checks `value` for the flag `name`: InvalidArgument naming the flag
  // when the back-end has no such flag or the value is wrong.
  absl::Status CheckOption(absl::string_view name,
                           absl::string_view value) const;
};

class Registry {
 public:
  // Every back-end linked into this program; the first is the default.
  static const Registry& Get();

  // Every back-end's init_process, in order; the first error.
  absl::Status InitProcess() const;

  // The back-end called `name`, or null.
  const Backend* Find(absl::string_view name) const;
  // The back-end called `name`; InvalidArgument "unknown platform: NAME
  // (available: systrap, kvm)" when there is none.
  absl::StatusOr<const Backend*> Lookup(absl::string_view name) const;
  // The names, in registration order.
  std::vector<std::string> Names() const;
  // "systrap|kvm" (flags' help) and "systrap, kvm" (errors).
  std::string NamesJoined(absl::string_view sep) const;
  // The platform used when none is named.
  const std::string& DefaultName() const { return backends_.front().name; }
  const std::vector<Backend>& backends() const { return backends_; }
  // The back-end, with `flag` among its options, or null: which back-end
  // an option like --kvm-fpu belongs to.
  const Backend* OwnerOfFlag(absl::string_view flag) const;
  // Of `options` (any back-end's), those of `backend`, each checked;
  // another back-end's are dropped or refused (OptionFlag::
  // ignored_elsewhere). InvalidArgument for a flag no back-end has or a
  // bad value, FailedPrecondition for a feature `backend` lacks.
  absl::StatusOr<OptionValues> OptionsFor(const Backend& backend,
                                          const OptionValues& options) const;

  // Adds a back-end (registration functions call it). Names are unique.
  void Add(Backend b);

 private:
  std::vector<Backend> backends_;
};

}  // namespace sandboxd::platform

#endif  // SANDBOXD_PLATFORMS_REGISTRY_H_
