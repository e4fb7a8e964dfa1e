// Where a container's sandbox runs. The runtime's verbs (main.cc) keep the
// OCI side (state, fifo, pid file, console); a Backend turns a LaunchSpec
// into the command the init proxy execs once `start` releases it, a command
// that runs the sandbox and exits with its init's status.
//
// SentryRunBackend: a Sentry of the container's own, `sentry run` (the
// `sentry` beside this binary, or --sentry / SANDBOXD_OCI_SENTRY).
#ifndef SANDBOXD_CLIENT_OCI_BACKEND_H_
#define SANDBOXD_CLIENT_OCI_BACKEND_H_

#include <string>
#include <vector>

#include "client/oci/spec.h"

namespace sandboxd::oci {

class Backend {
 public:
  virtual ~Backend() = default;
  // argv of the init proxy's command; argv[0] is an absolute path.
  virtual std::vector<std::string> InitCommand(const std::string& id,
                                               const LaunchSpec& spec) const = 0;
};

class SentryRunBackend : public Backend {
 public:
  explicit SentryRunBackend(std::string sentry) : sentry_(std::move(sentry)) {}
  std::vector<std::string> InitCommand(const std::string& id,
                                       const LaunchSpec& spec) const override;

 private:
  std::string sentry_;
};

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_BACKEND_H_
