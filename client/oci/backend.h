// Where a container's sandbox runs. The runtime's verbs (main.cc) keep the
// OCI side (state, fifo, pid file, console); a Backend turns a LaunchSpec
// into the command that create's child execs: the init proxy, which runs
// the sandbox once `start` opens exec.fifo and exits with its init's status.
//
// ServeBackend (--backend=serve, the default): `sandboxd-oci init-proxy`
// (proxy.h), which drives a `sentry serve` of the container's own over the
// control channel, so that `exec` and `kill --all` reach the sandbox.
// DaemonBackend (--sandboxd-socket or SANDBOXD_OCI_SOCKET): `sandboxd-oci
// daemon-proxy` (daemon_proxy.h), the sandbox from sandboxd's warm pool.
// SentryRunBackend (--backend=run): create's child waits on exec.fifo
// itself, then execs `sentry run`; no exec.
// Both find the `sentry` beside this binary, or --sentry /
// SANDBOXD_OCI_SENTRY.
#ifndef SANDBOXD_CLIENT_OCI_BACKEND_H_
#define SANDBOXD_CLIENT_OCI_BACKEND_H_

#include <string>
#include <vector>

#include "client/oci/spec.h"

namespace sandboxd::oci {

class Backend {
 public:
  virtual ~Backend() = default;
  // argv of the command create's child execs; argv[0] is an absolute path.
  // `report_fd` stays open across that exec when ReportsItself().
  virtual std::vector<std::string> InitCommand(const std::string& id,
                                               const LaunchSpec& spec,
                                               const std::string& bundle,
                                               int report_fd) const = 0;
  // Whether the command waits on exec.fifo and reports create's errors
  // itself (else create's child does, before its exec).
  virtual bool ReportsItself() const = 0;
  // Whether `exec` and `kill --all` go through the init proxy's socket.
  virtual bool Serves() const = 0;
};

class ServeBackend : public Backend {
 public:
  ServeBackend(std::string self, std::string root, std::string sentry)
      : self_(std::move(self)), root_(std::move(root)), sentry_(std::move(sentry)) {}
  std::vector<std::string> InitCommand(const std::string& id, const LaunchSpec& spec,
                                       const std::string& bundle,
                                       int report_fd) const override;
  bool ReportsItself() const override { return true; }
  bool Serves() const override { return true; }

 private:
  std::string self_, root_, sentry_;
};

class DaemonBackend : public Backend {
 public:
  DaemonBackend(std::string self, std::string root, std::string socket)
      : self_(std::move(self)), root_(std::move(root)), socket_(std::move(socket)) {}
  std::vector<std::string> InitCommand(const std::string& id, const LaunchSpec& spec,
                                       const std::string& bundle,
                                       int report_fd) const override;
  bool ReportsItself() const override { return true; }
  bool Serves() const override { return false; }

 private:
  std::string self_, root_, socket_;
};

class SentryRunBackend : public Backend {
 public:
  explicit SentryRunBackend(std::string sentry) : sentry_(std::move(sentry)) {}
  std::vector<std::string> InitCommand(const std::string& id, const LaunchSpec& spec,
                                       const std::string& bundle,
                                       int report_fd) const override;
  bool ReportsItself() const override { return false; }
  bool Serves() const override { return false; }

 private:
  std::string sentry_;
};

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_BACKEND_H_
