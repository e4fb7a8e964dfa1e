#include "client/oci/backend.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sandboxd::oci {

std::vector<std::string> ServeBackend::InitCommand(const std::string& id,
                                                  const LaunchSpec& spec,
                                                  const std::string& bundle,
                                                  int report_fd) const {
  std::vector<std::string> argv = {self_,
                                   absl::StrCat("--root=", root_),
                                   absl::StrCat("--sentry=", sentry_),
                                   "init-proxy",
                                   absl::StrCat("--bundle=", bundle),
                                   absl::StrCat("--hostname=", spec.hostname),
                                   absl::StrCat("--report-fd=", report_fd)};
  if (!spec.restore_image.empty()) {
    argv.push_back(absl::StrCat("--restore-image=", spec.restore_image));
  }
  argv.push_back(id);
  return argv;
}

std::vector<std::string> DaemonBackend::InitCommand(const std::string& id,
                                                   const LaunchSpec& spec,
                                                   const std::string& bundle,
                                                   int report_fd) const {
  return {self_,
          absl::StrCat("--root=", root_),
          absl::StrCat("--sandboxd-socket=", socket_),
          "daemon-proxy",
          absl::StrCat("--bundle=", bundle),
          absl::StrCat("--hostname=", spec.hostname),
          absl::StrCat("--report-fd=", report_fd),
          absl::StrCat("--restore-image=", spec.restore_image),
          id};
}

std::vector<std::string> SentryRunBackend::InitCommand(
    const std::string& id, const LaunchSpec& spec, const std::string& bundle,
    int report_fd) const {
  std::vector<std::string> argv = {sentry_, "run",
                                   absl::StrCat("--rootfs=", spec.rootfs)};
  if (spec.read_only_root) argv.push_back("--read-only");
  // The container's init ignores a signal it has no handler for, as
  // runc's (and the serve and daemon backends' SandboxSpec.container_init).
  argv.push_back("--container-init");
  for (const std::string& m : spec.mount_flags) argv.push_back(m);
  argv.push_back(absl::StrCat("--cwd=", spec.cwd));
  argv.push_back(absl::StrCat("--hostname=", spec.hostname.empty() ? id : spec.hostname));
  std::string user = absl::StrCat("--user=", spec.uid, ":", spec.gid);
  for (uint32_t g : spec.groups) absl::StrAppend(&user, ",", g);
  argv.push_back(user);
  for (const std::string& e : spec.env) argv.push_back(absl::StrCat("--env=", e));
  if (spec.memory_bytes > 0) {
    argv.push_back(absl::StrCat("--memory=", spec.memory_bytes));
  }
  if (spec.cpus > 0) argv.push_back(absl::StrCat("--cpus=", spec.cpus));
  if (spec.pids > 0) argv.push_back(absl::StrCat("--pids=", spec.pids));
  // kJoin: the init proxy has joined the namespace; the Sentry's sockets
  // live in it as in the host's.
  argv.push_back(spec.network == LaunchSpec::Network::kOwn ? "--network=none"
                                                           : "--network=host");
  argv.push_back("--");
  for (const std::string& a : spec.args) argv.push_back(a);
  return argv;
}

}  // namespace sandboxd::oci
