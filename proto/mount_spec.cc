#include "proto/mount_spec.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sandboxd {
namespace {

absl::Status CheckTarget(absl::string_view flag, const std::string& t) {
  if (t.empty() || t[0] != '/' || t == "/") {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the target must be an absolute path other than /, got \"", t,
        "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::Mount> ParseVolumeFlag(absl::string_view v) {
  std::vector<std::string> parts = absl::StrSplit(v, ':');
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("-v wants HOSTDIR:DIR[:ro|rw], got: ", v));
  }
  v1::Mount m;
  m.set_type(v1::Mount::TYPE_BIND);
  m.set_source(parts[0]);
  m.set_target(parts[1]);
  if (parts.size() == 3) {
    if (parts[2] == "ro") {
      m.set_read_only(true);
    } else if (parts[2] != "rw") {
      return absl::InvalidArgumentError(
          absl::StrCat("-v: the mode must be ro or rw, got: ", parts[2]));
    }
  }
  if (m.source()[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("-v: the host path must be absolute, got: ", m.source()));
  }
  if (absl::Status s = CheckTarget("-v", m.target()); !s.ok()) return s;
  return m;
}

absl::StatusOr<v1::Mount> ParseMountFlag(absl::string_view v) {
  v1::Mount m;
  std::vector<std::string> tmpfs_opts;
  for (absl::string_view kv : absl::StrSplit(v, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    const std::string& k = p.first;
    const std::string& val = p.second;
    if (k == "type") {
      if (val == "bind") {
        m.set_type(v1::Mount::TYPE_BIND);
      } else if (val == "tmpfs") {
        m.set_type(v1::Mount::TYPE_TMPFS);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "--mount: type must be bind or tmpfs, got: ", val));
      }
    } else if (k == "source" || k == "src") {
      m.set_source(val);
    } else if (k == "target" || k == "destination" || k == "dst") {
      m.set_target(val);
    } else if (k == "readonly" || k == "ro") {
      if (!val.empty() && val != "true" && val != "1" && val != "false" &&
          val != "0") {
        return absl::InvalidArgumentError(
            absl::StrCat("--mount: readonly wants true or false, got: ", val));
      }
      m.set_read_only(val.empty() || val == "true" || val == "1");
    } else if (k == "tmpfs-size") {
      tmpfs_opts.push_back(absl::StrCat("size=", val));
    } else if (k == "tmpfs-mode") {
      tmpfs_opts.push_back(absl::StrCat("mode=", val));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--mount: unknown key ", k));
    }
  }
  if (m.type() == v1::Mount::TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("--mount: type=bind or type=tmpfs is needed");
  }
  if (m.type() == v1::Mount::TYPE_BIND &&
      (m.source().empty() || m.source()[0] != '/')) {
    return absl::InvalidArgumentError(
        "--mount: a bind mount needs an absolute source=");
  }
  if (m.type() == v1::Mount::TYPE_TMPFS && !m.source().empty()) {
    return absl::InvalidArgumentError("--mount: a tmpfs mount has no source");
  }
  if (m.type() == v1::Mount::TYPE_BIND && !tmpfs_opts.empty()) {
    return absl::InvalidArgumentError(
        "--mount: tmpfs-size and tmpfs-mode are for type=tmpfs");
  }
  m.set_options(absl::StrJoin(tmpfs_opts, ","));
  if (absl::Status s = CheckTarget("--mount", m.target()); !s.ok()) return s;
  return m;
}

absl::StatusOr<v1::Mount> ParseTmpfsFlag(absl::string_view v) {
  std::pair<std::string, std::string> p = absl::StrSplit(v, absl::MaxSplits(':', 1));
  v1::Mount m;
  m.set_type(v1::Mount::TYPE_TMPFS);
  m.set_target(p.first);
  m.set_options(p.second);
  if (absl::Status s = CheckTarget("--tmpfs", m.target()); !s.ok()) return s;
  return m;
}

absl::StatusOr<v1::PortMapping> ParsePublishFlag(absl::string_view v) {
  auto bad = [v](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-p wants [IP:]HOSTPORT:PORT[/tcp|/udp], got \"", v, "\": ", why));
  };
  v1::PortMapping p;
  absl::string_view rest = v;
  if (size_t slash = rest.rfind('/'); slash != absl::string_view::npos) {
    absl::string_view proto = rest.substr(slash + 1);
    if (proto == "udp") {
      p.set_protocol(v1::PortMapping::PROTOCOL_UDP);
    } else if (proto != "tcp") {
      return bad("the protocol is tcp or udp");
    }
    rest = rest.substr(0, slash);
  }
  std::string ip;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == absl::string_view::npos || close + 1 >= rest.size() ||
        rest[close + 1] != ':') {
      return bad("an IPv6 address goes in brackets, then ':'");
    }
    ip = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 2);
  }
  std::vector<std::string> parts = absl::StrSplit(rest, ':');
  if (ip.empty() && parts.size() == 3) {
    ip = parts[0];
    parts.erase(parts.begin());
  }
  if (parts.size() != 2) return bad("want HOSTPORT:PORT");
  uint32_t host_port, port;
  if (!absl::SimpleAtoi(parts[0], &host_port) || host_port == 0 ||
      host_port > 65535 || !absl::SimpleAtoi(parts[1], &port) || port == 0 ||
      port > 65535) {
    return bad("ports are 1 to 65535");
  }
  if (!ip.empty()) {
    unsigned char buf[sizeof(in6_addr)];
    if (inet_pton(AF_INET, ip.c_str(), buf) != 1 &&
        inet_pton(AF_INET6, ip.c_str(), buf) != 1) {
      return bad("not an IPv4 or IPv6 address");
    }
  }
  p.set_host_ip(ip);
  p.set_host_port(host_port);
  p.set_container_port(port);
  return p;
}

std::string PortMappingString(const v1::PortMapping& p) {
  const std::string ip = p.host_ip().empty() ? "127.0.0.1" : p.host_ip();
  return absl::StrCat(
      ip.find(':') != std::string::npos ? absl::StrCat("[", ip, "]") : ip, ":",
      p.host_port(), ":", p.container_port(),
      p.protocol() == v1::PortMapping::PROTOCOL_UDP ? "/udp" : "/tcp");
}

absl::StatusOr<UniqueFd> OpenBindSource(const v1::Mount& m,
                                        absl::string_view field) {
  if (m.source().empty() || m.source()[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".source: must be an absolute host path, got \"", m.source(),
        "\""));
  }
  // Symlinks are followed here, on the host, once (docker resolves a bind
  // source when the container is made): the sandbox gets what the link
  // names now, whatever the link becomes later. A daemon's allowed roots
  // are checked against where the descriptor ends up.
  UniqueFd fd(open(m.source().c_str(), O_PATH | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || fstat(fd.get(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".source: ", m.source(), ": ", strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) return fd;
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".source: ", m.source(),
        ": neither a directory nor a regular file"));
  }
  // The file the O_PATH descriptor is, reopened through it (never a second
  // walk of the path, which the link's owner could have changed since).
  const std::string self = absl::StrCat("/proc/self/fd/", fd.get());
  UniqueFd file(open(self.c_str(), (m.read_only() ? O_RDONLY : O_RDWR) |
                                       O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
  if (!file.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".source: ", m.source(), ": ", strerror(errno)));
  }
  struct stat st2;
  if (fstat(file.get(), &st2) != 0 || st2.st_ino != st.st_ino ||
      st2.st_dev != st.st_dev) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".source: ", m.source(), ": changed while opened"));
  }
  fcntl(file.get(), F_SETFL, 0);  // O_NONBLOCK was for the open only
  return file;
}

}  // namespace sandboxd
