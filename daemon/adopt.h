// What a starting daemon does with what an earlier instance left in its
// state directory (state_dir.h): every sandbox record comes back, with its
// Sentry re-adopted when that still runs and answers on its control socket,
// or FAILED with the reason when it does not; every other recorded Sentry
// (the pool's, or one that cannot be reached) is killed and its cgroup
// removed; nothing the state directory does not record is touched.
#ifndef SANDBOXD_DAEMON_ADOPT_H_
#define SANDBOXD_DAEMON_ADOPT_H_

#include <functional>
#include <memory>
#include <vector>

#include "daemon/cgroup.h"
#include "daemon/metrics.h"
#include "daemon/pool.h"
#include "daemon/sandbox.h"
#include "daemon/state_dir.h"

namespace sandboxd {
namespace daemon {

struct AdoptOptions {
  StateDir* state_dir = nullptr;
  SentryFactory* factory = nullptr;
  CgroupManager* cgroups = nullptr;  // may be null
  Metrics* metrics = nullptr;        // may be null
  std::function<void()> on_state_change;
};

// Call once at start, before the pool spawns anything.
std::vector<std::shared_ptr<Sandbox>> AdoptSandboxes(const AdoptOptions& o);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_ADOPT_H_
