#include "client/oci/spec.h"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "base/status_macros.h"

namespace sandboxd::oci {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

const Value* Get(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end() || it->second.has_null_value()) return nullptr;
  return &it->second;
}

absl::StatusOr<const Struct*> GetObject(const Struct& s, const std::string& key,
                                        absl::string_view field) {
  const Value* v = Get(s, key);
  if (v == nullptr) return nullptr;
  if (!v->has_struct_value()) return FieldError(field, "wants an object");
  return &v->struct_value();
}

absl::StatusOr<const ListValue*> GetList(const Struct& s, const std::string& key,
                                         absl::string_view field) {
  const Value* v = Get(s, key);
  if (v == nullptr) return nullptr;
  if (!v->has_list_value()) return FieldError(field, "wants an array");
  return &v->list_value();
}

absl::Status GetString(const Struct& s, const std::string& key,
                       absl::string_view field, std::string* out) {
  const Value* v = Get(s, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->has_string_value()) return FieldError(field, "wants a string");
  *out = v->string_value();
  return absl::OkStatus();
}

absl::Status GetBool(const Struct& s, const std::string& key,
                     absl::string_view field, bool* out) {
  const Value* v = Get(s, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->has_bool_value()) return FieldError(field, "wants true or false");
  *out = v->bool_value();
  return absl::OkStatus();
}

// A JSON number that is a whole number in [min, max]; `*present` says
// whether the field was there.
absl::Status GetInt(const Struct& s, const std::string& key,
                    absl::string_view field, double min, double max,
                    int64_t* out, bool* present = nullptr) {
  const Value* v = Get(s, key);
  if (present != nullptr) *present = v != nullptr;
  if (v == nullptr) return absl::OkStatus();
  if (!v->has_number_value() || v->number_value() != std::floor(v->number_value()) ||
      v->number_value() < min || v->number_value() > max) {
    return FieldError(field, absl::StrCat("wants a whole number from ", min,
                                          " to ", max));
  }
  *out = static_cast<int64_t>(v->number_value());
  return absl::OkStatus();
}

absl::Status GetStrings(const Struct& s, const std::string& key,
                        absl::string_view field, std::vector<std::string>* out) {
  auto l = GetList(s, key, field);
  if (!l.ok()) return l.status();
  if (*l == nullptr) return absl::OkStatus();
  out->clear();
  for (int i = 0; i < (*l)->values_size(); i++) {
    if (!(*l)->values(i).has_string_value()) {
      return FieldError(absl::StrCat(field, "[", i, "]"), "wants a string");
    }
    out->push_back((*l)->values(i).string_value());
  }
  return absl::OkStatus();
}

absl::StatusOr<const Struct*> Object(const Struct& s, const std::string& key,
                                     absl::string_view field) {
  return GetObject(s, key, field);
}

// The fields of `s` that are not in `known`: the first one is an error
// (a field this runtime does not know, so cannot honour).
absl::Status OnlyKnown(const Struct& s, absl::string_view prefix,
                       std::initializer_list<absl::string_view> known) {
  for (const auto& [k, v] : s.fields()) {
    bool ok = false;
    for (absl::string_view n : known) ok = ok || n == k;
    if (!ok && !v.has_null_value()) {
      return FieldError(absl::StrCat(prefix, k),
                        "not supported by sandboxd-oci");
    }
  }
  return absl::OkStatus();
}

struct RlimitName {
  const char* name;
  int resource;
  // Set on the init proxy, whose limits the sandbox's init inherits
  // (sentry/kernel/thread_group.cc). The others would bind the Sentry
  // process itself (its memory file, its threads' stacks, its CPU time):
  // only the runtime's own values, which the sandbox gets anyway, pass.
  bool settable;
};

const std::vector<RlimitName>& RlimitNames() {
  static const auto* names = new std::vector<RlimitName>{
      {"RLIMIT_NOFILE", RLIMIT_NOFILE, true},
      {"RLIMIT_NPROC", RLIMIT_NPROC, true},
      {"RLIMIT_CORE", RLIMIT_CORE, true},
      {"RLIMIT_SIGPENDING", RLIMIT_SIGPENDING, true},
      {"RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE, true},
      {"RLIMIT_NICE", RLIMIT_NICE, true},
      {"RLIMIT_RTPRIO", RLIMIT_RTPRIO, true},
      {"RLIMIT_LOCKS", RLIMIT_LOCKS, true},
      {"RLIMIT_AS", RLIMIT_AS, false},
      {"RLIMIT_DATA", RLIMIT_DATA, false},
      {"RLIMIT_FSIZE", RLIMIT_FSIZE, false},
      {"RLIMIT_CPU", RLIMIT_CPU, false},
      {"RLIMIT_RSS", RLIMIT_RSS, false},
      {"RLIMIT_RTTIME", RLIMIT_RTTIME, false},
      {"RLIMIT_STACK", RLIMIT_STACK, false},
      {"RLIMIT_MEMLOCK", RLIMIT_MEMLOCK, false},
  };
  return *names;
}

absl::Status ParseProcessObject(const Struct& p, LaunchSpec* out) {
  RETURN_IF_ERROR(OnlyKnown(
      p, "process.",
      {"terminal", "consoleSize", "user", "args", "env", "cwd", "capabilities",
       "rlimits", "noNewPrivileges", "apparmorProfile", "oomScoreAdj",
       "selinuxLabel", "commandLine"}));
  RETURN_IF_ERROR(GetBool(p, "terminal", "process.terminal", &out->terminal));
  RETURN_IF_ERROR(GetStrings(p, "args", "process.args", &out->args));
  if (out->args.empty()) return FieldError("process.args", "is empty");
  RETURN_IF_ERROR(GetStrings(p, "env", "process.env", &out->env));
  for (size_t i = 0; i < out->env.size(); i++) {
    if (out->env[i].find('=') == std::string::npos || out->env[i][0] == '=') {
      return FieldError(absl::StrCat("process.env[", i, "]"), "wants K=V");
    }
  }
  RETURN_IF_ERROR(GetString(p, "cwd", "process.cwd", &out->cwd));
  if (out->cwd.empty() || out->cwd[0] != '/') {
    return FieldError("process.cwd", "wants an absolute path");
  }
  auto user = Object(p, "user", "process.user");
  if (!user.ok()) return user.status();
  if (*user != nullptr) {
    const Struct& u = **user;
    RETURN_IF_ERROR(OnlyKnown(u, "process.user.",
                                  {"uid", "gid", "additionalGids", "umask"}));
    int64_t v = 0;
    RETURN_IF_ERROR(GetInt(u, "uid", "process.user.uid", 0, 0xfffffffe, &v));
    out->uid = static_cast<uint32_t>(v);
    v = 0;
    RETURN_IF_ERROR(GetInt(u, "gid", "process.user.gid", 0, 0xfffffffe, &v));
    out->gid = static_cast<uint32_t>(v);
    auto gids = GetList(u, "additionalGids", "process.user.additionalGids");
    if (!gids.ok()) return gids.status();
    if (*gids != nullptr) {
      for (int i = 0; i < (*gids)->values_size(); i++) {
        const Value& g = (*gids)->values(i);
        if (!g.has_number_value() || g.number_value() < 0 ||
            g.number_value() > 0xfffffffe) {
          return FieldError(absl::StrCat("process.user.additionalGids[", i, "]"),
                            "wants a gid");
        }
        out->groups.push_back(static_cast<uint32_t>(g.number_value()));
      }
    }
    int64_t umask = 022;
    bool has_umask = false;
    RETURN_IF_ERROR(GetInt(u, "umask", "process.user.umask", 0, 0777,
                               &umask, &has_umask));
    if (has_umask && umask != 022) {
      return FieldError("process.user.umask",
                        "the Sentry starts every program with umask 022");
    }
  }
  auto rl = GetList(p, "rlimits", "process.rlimits");
  if (!rl.ok()) return rl.status();
  if (*rl != nullptr) {
    for (int i = 0; i < (*rl)->values_size(); i++) {
      const std::string f = absl::StrCat("process.rlimits[", i, "]");
      if (!(*rl)->values(i).has_struct_value()) return FieldError(f, "wants an object");
      const Struct& r = (*rl)->values(i).struct_value();
      std::string type;
      RETURN_IF_ERROR(GetString(r, "type", f + ".type", &type));
      const RlimitName* rn = nullptr;
      for (const RlimitName& n : RlimitNames()) {
        if (type == n.name) rn = &n;
      }
      if (rn == nullptr) {
        return FieldError(f + ".type", absl::StrCat("unknown rlimit ", type));
      }
      // JSON numbers: 2^64-1 (unlimited) arrives rounded to 2^64.
      auto get = [&r, &f](const char* k, rlim_t* v) -> absl::Status {
        const Value* x = Get(r, k);
        if (x == nullptr || !x->has_number_value() || x->number_value() < 0) {
          return FieldError(absl::StrCat(f, ".", k), "wants a non-negative number");
        }
        *v = x->number_value() >= 1.8e19 ? RLIM_INFINITY
                                         : static_cast<rlim_t>(x->number_value());
        return absl::OkStatus();
      };
      rlimit lim{};
      RETURN_IF_ERROR(get("soft", &lim.rlim_cur));
      RETURN_IF_ERROR(get("hard", &lim.rlim_max));
      if (lim.rlim_cur > lim.rlim_max) return FieldError(f + ".soft", "is above hard");
      const int resource = rn->resource;
      if (!rn->settable) {
        rlimit own{};
        getrlimit(static_cast<__rlimit_resource>(resource), &own);
        if (own.rlim_cur == lim.rlim_cur && own.rlim_max == lim.rlim_max) continue;
        return FieldError(
            f + ".type",
            absl::StrCat(type, " other than the runtime's own (soft ", own.rlim_cur,
                         ", hard ", own.rlim_max,
                         ") is not supported: it would bind the Sentry itself"));
      }
      out->rlimits.emplace_back(resource, lim);
    }
  }
  // capabilities, noNewPrivileges, apparmorProfile, selinuxLabel and
  // oomScoreAdj confine a process on the host kernel; the program never
  // reaches the host kernel (README.md, "What config.json may ask for").
  return absl::OkStatus();
}

absl::Status ParseMounts(const ListValue& mounts, LaunchSpec* out) {
  for (int i = 0; i < mounts.values_size(); i++) {
    const std::string f = absl::StrCat("mounts[", i, "]");
    if (!mounts.values(i).has_struct_value()) return FieldError(f, "wants an object");
    const Struct& m = mounts.values(i).struct_value();
    RETURN_IF_ERROR(OnlyKnown(m, f + ".",
                                  {"destination", "type", "source", "options",
                                   "uidMappings", "gidMappings"}));
    if (Get(m, "uidMappings") != nullptr || Get(m, "gidMappings") != nullptr) {
      return FieldError(f + ".uidMappings", "id-mapped mounts are not supported");
    }
    std::string dest, type, source;
    std::vector<std::string> options;
    RETURN_IF_ERROR(GetString(m, "destination", f + ".destination", &dest));
    RETURN_IF_ERROR(GetString(m, "type", f + ".type", &type));
    RETURN_IF_ERROR(GetString(m, "source", f + ".source", &source));
    RETURN_IF_ERROR(GetStrings(m, "options", f + ".options", &options));
    if (dest.empty() || dest[0] != '/') {
      return FieldError(f + ".destination", "wants an absolute path");
    }
    bool bind = type == "bind";
    bool ro = false;
    for (const std::string& o : options) {
      if (o == "bind" || o == "rbind") bind = true;
      if (o == "ro") ro = true;
      if (o == "rw") ro = false;
    }
    if (bind) {
      if (source.empty() || source[0] != '/') {
        return FieldError(f + ".source", "a bind mount wants an absolute host path");
      }
      out->mount_flags.push_back(
          absl::StrCat("--volume=", source, ":", dest, ro ? ":ro" : ":rw"));
      continue;
    }
    // The sandbox's own filesystems: the Sentry mounts its procfs at /proc,
    // its devfs at /dev (with /dev/pts and /dev/shm), and has no sysfs,
    // cgroupfs or mqueue of the host to show.
    if ((type == "proc" && dest == "/proc") ||
        (type == "devpts" && dest == "/dev/pts") ||
        (type == "tmpfs" && (dest == "/dev" || dest == "/dev/shm")) ||
        (type == "mqueue" && dest == "/dev/mqueue") ||
        (type == "sysfs" && dest == "/sys") ||
        ((type == "cgroup" || type == "cgroup2") && dest == "/sys/fs/cgroup")) {
      continue;
    }
    if (type == "tmpfs") {
      std::vector<std::string> opts;
      for (const std::string& o : options) {
        if (absl::StartsWith(o, "size=") || absl::StartsWith(o, "mode=")) {
          opts.push_back(o);
        }
      }
      std::string flag = absl::StrCat("--tmpfs=", dest);
      if (!opts.empty()) absl::StrAppend(&flag, ":", absl::StrJoin(opts, ","));
      out->mount_flags.push_back(flag);
      continue;
    }
    return FieldError(f + ".type",
                      absl::StrCat("a ", type.empty() ? "(none)" : type,
                                   " mount at ", dest,
                                   " is not supported (supported: bind, "
                                   "tmpfs, and proc, devpts, sysfs, mqueue, "
                                   "cgroup at their usual places)"));
  }
  return absl::OkStatus();
}

absl::Status ParseResources(const Struct& r, LaunchSpec* out) {
  RETURN_IF_ERROR(OnlyKnown(r, "linux.resources.",
                                {"devices", "memory", "cpu", "pids",
                                 "blockIO", "hugepageLimits", "network"}));
  auto mem = Object(r, "memory", "linux.resources.memory");
  if (!mem.ok()) return mem.status();
  if (*mem != nullptr) {
    int64_t limit = 0;
    RETURN_IF_ERROR(GetInt(**mem, "limit", "linux.resources.memory.limit",
                               -1, 9.2e18, &limit));
    if (limit > 0) out->memory_bytes = static_cast<uint64_t>(limit);
    out->memory_unlimited = limit == -1;
    for (const auto& [k, v] : (*mem)->fields()) {
      if (k != "limit" && !v.has_null_value()) {
        out->notes.push_back(absl::StrCat(
            "linux.resources.memory.", k,
            ": not applied (the Sentry does not enforce it; the "
            "sandbox's memory is bounded by memory.limit alone)"));
      }
    }
  }
  auto cpu = Object(r, "cpu", "linux.resources.cpu");
  if (!cpu.ok()) return cpu.status();
  if (*cpu != nullptr) {
    int64_t quota = 0, period = 100000;
    RETURN_IF_ERROR(GetInt(**cpu, "quota", "linux.resources.cpu.quota",
                               -1, 9.2e18, &quota));
    RETURN_IF_ERROR(GetInt(**cpu, "period", "linux.resources.cpu.period",
                               1, 9.2e18, &period));
    if (quota > 0) out->cpus = (quota + period - 1) / period;
    out->cpu_unlimited = quota == -1;
    std::string cpus;
    RETURN_IF_ERROR(GetString(**cpu, "cpus", "linux.resources.cpu.cpus", &cpus));
    if (!cpus.empty()) {
      return FieldError("linux.resources.cpu.cpus", "cpusets are not supported");
    }
    std::string mems;
    RETURN_IF_ERROR(GetString(**cpu, "mems", "linux.resources.cpu.mems", &mems));
    if (!mems.empty()) {
      return FieldError("linux.resources.cpu.mems", "cpusets are not supported");
    }
    for (const auto& [k, v] : (*cpu)->fields()) {
      if (k != "quota" && k != "period" && k != "cpus" && k != "mems" &&
          !v.has_null_value()) {
        out->notes.push_back(absl::StrCat(
            "linux.resources.cpu.", k,
            ": not applied (the Sentry does not enforce it; only "
            "quota/period bound the sandbox)"));
      }
    }
  }
  auto pids = Object(r, "pids", "linux.resources.pids");
  if (!pids.ok()) return pids.status();
  if (*pids != nullptr) {
    int64_t limit = 0;
    RETURN_IF_ERROR(GetInt(**pids, "limit", "linux.resources.pids.limit",
                               -1, 9.2e18, &limit));
    if (limit > 0) out->pids = static_cast<uint64_t>(limit);
    out->pids_unlimited = limit == -1;
  }
  for (const char* k : {"hugepageLimits", "network"}) {
    const Value* v = Get(r, k);
    if (v != nullptr && !(v->has_list_value() && v->list_value().values_size() == 0) &&
        !(v->has_struct_value() && v->struct_value().fields_size() == 0)) {
      return FieldError(absl::StrCat("linux.resources.", k), "not supported");
    }
  }
  const Value* bio = Get(r, "blockIO");
  if (bio != nullptr && bio->has_struct_value() && bio->struct_value().fields_size() > 0) {
    out->notes.push_back(
        "linux.resources.blockIO: not applied (the Sentry has no such limit, "
        "and none is written to the container's cgroup)");
  }
  // devices: the sandbox's /dev is the Sentry's devfs (null, zero, full,
  // random, urandom, tty, ptmx), never a host device.
  return absl::OkStatus();
}

absl::Status ParseLinux(const Struct& l, LaunchSpec* out) {
  RETURN_IF_ERROR(OnlyKnown(
      l, "linux.",
      {"namespaces", "resources", "cgroupsPath", "maskedPaths", "readonlyPaths",
       "seccomp", "devices", "uidMappings", "gidMappings", "sysctl",
       "mountLabel", "rootfsPropagation", "intelRdt", "personality"}));
  RETURN_IF_ERROR(GetString(l, "cgroupsPath", "linux.cgroupsPath", &out->cgroups_path));
  // net.ipv4.ping_group_range (podman sets one): the Sentry's own network
  // namespace lets its sockets ping already (sentry/isolation.cc), and
  // the program's ping sockets are the Sentry's to allow; any other
  // sysctl is refused.
  auto sysctl = Object(l, "sysctl", "linux.sysctl");
  if (!sysctl.ok()) return sysctl.status();
  if (*sysctl != nullptr) {
    for (const auto& [k, v] : (*sysctl)->fields()) {
      if (k != "net.ipv4.ping_group_range") {
        return FieldError(absl::StrCat("linux.sysctl.", k), "not supported");
      }
    }
  }
  for (const char* k : {"uidMappings", "gidMappings", "intelRdt"}) {
    const Value* v = Get(l, k);
    bool empty = v == nullptr ||
                 (v->has_list_value() && v->list_value().values_size() == 0) ||
                 (v->has_struct_value() && v->struct_value().fields_size() == 0);
    if (!empty) return FieldError(absl::StrCat("linux.", k), "not supported");
  }
  auto ns = GetList(l, "namespaces", "linux.namespaces");
  if (!ns.ok()) return ns.status();
  bool pid_ns = false;
  if (*ns != nullptr) {
    for (int i = 0; i < (*ns)->values_size(); i++) {
      const std::string f = absl::StrCat("linux.namespaces[", i, "]");
      if (!(*ns)->values(i).has_struct_value()) return FieldError(f, "wants an object");
      const Struct& n = (*ns)->values(i).struct_value();
      std::string type, path;
      RETURN_IF_ERROR(GetString(n, "type", f + ".type", &type));
      RETURN_IF_ERROR(GetString(n, "path", f + ".path", &path));
      if (type == "network") {
        out->network = path.empty() ? LaunchSpec::Network::kOwn
                                    : LaunchSpec::Network::kJoin;
        out->netns_path = path;
        continue;
      }
      if (type != "pid" && type != "ipc" && type != "uts" && type != "mount" &&
          type != "cgroup" && type != "user") {
        return FieldError(f + ".type", absl::StrCat("unknown namespace ", type));
      }
      if (type == "pid") pid_ns = true;
      // A pod's (Kubernetes through CRI) UTS namespace: its host name is
      // the sandbox's.
      if (type == "uts" && !path.empty()) {
        out->utsns_path = path;
        continue;
      }
      // A pod's IPC namespace cannot be shared with a Sentry's kernel;
      // for a CRI container that is a warning, not a refusal, or no pod
      // could run.
      if (type == "ipc" && !path.empty() &&
          out->annotations.count("io.kubernetes.cri.container-type") > 0) {
        out->notes.push_back(absl::StrCat(
            f, ".path: the pod's IPC namespace is not shared: the sandbox has "
               "its own (System V IPC and POSIX message queues do not reach "
               "the pod's other containers)"));
        continue;
      }
      // The Sentry's kernel has its own pids, IPC, host name and mounts:
      // it cannot join another container's.
      if (!path.empty()) {
        return FieldError(f + ".path",
                          absl::StrCat("joining a ", type,
                                       " namespace is not supported (the "
                                       "sandbox's kernel has its own)"));
      }
    }
  }
  if (!pid_ns) {
    return FieldError("linux.namespaces",
                      "no pid namespace (the host's pids) is not supported: "
                      "the sandbox's kernel has its own");
  }
  auto res = Object(l, "resources", "linux.resources");
  if (!res.ok()) return res.status();
  if (*res != nullptr) RETURN_IF_ERROR(ParseResources(**res, out));
  return absl::OkStatus();
}

// The caller names the file in the error.
absl::StatusOr<Struct> ParseJson(absl::string_view json) {
  Struct s;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(
      std::string(json), &s, opts);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", st.message().as_string()));
  }
  return s;
}

}  // namespace

absl::StatusOr<LaunchSpec> ParseConfig(absl::string_view json,
                                       const std::string& bundle) {
  auto parsed = ParseJson(json);
  if (!parsed.ok()) return parsed.status();
  const Struct& c = *parsed;
  RETURN_IF_ERROR(OnlyKnown(c, "",
                                {"ociVersion", "process", "root", "hostname",
                                 "domainname", "mounts", "hooks", "annotations",
                                 "linux"}));
  LaunchSpec out;
  auto p = Object(c, "process", "process");
  if (!p.ok()) return p.status();
  if (*p == nullptr) return FieldError("process", "is missing");
  RETURN_IF_ERROR(ParseProcessObject(**p, &out));
  auto root = Object(c, "root", "root");
  if (!root.ok()) return root.status();
  if (*root == nullptr) return FieldError("root", "is missing");
  std::string path;
  RETURN_IF_ERROR(GetString(**root, "path", "root.path", &path));
  if (path.empty()) return FieldError("root.path", "is missing");
  out.rootfs = path[0] == '/' ? path : absl::StrCat(bundle, "/", path);
  RETURN_IF_ERROR(GetBool(**root, "readonly", "root.readonly", &out.read_only_root));
  RETURN_IF_ERROR(GetString(c, "hostname", "hostname", &out.hostname));
  std::string domain;
  RETURN_IF_ERROR(GetString(c, "domainname", "domainname", &domain));
  if (!domain.empty()) return FieldError("domainname", "not supported");
  const Value* hooks = Get(c, "hooks");
  if (hooks != nullptr && hooks->has_struct_value()) {
    for (const auto& [k, v] : hooks->struct_value().fields()) {
      if (v.has_list_value() && v.list_value().values_size() > 0) {
        return FieldError(absl::StrCat("hooks.", k),
                          "hooks are not run by sandboxd-oci");
      }
    }
  }
  auto mounts = GetList(c, "mounts", "mounts");
  if (!mounts.ok()) return mounts.status();
  if (*mounts != nullptr) RETURN_IF_ERROR(ParseMounts(**mounts, &out));
  auto ann = Object(c, "annotations", "annotations");
  if (!ann.ok()) return ann.status();
  if (*ann != nullptr) {
    for (const auto& [k, v] : (*ann)->fields()) {
      if (!v.has_string_value()) {
        return FieldError(absl::StrCat("annotations.", k), "wants a string");
      }
      out.annotations[k] = v.string_value();
    }
  }
  auto lnx = Object(c, "linux", "linux");
  if (!lnx.ok()) return lnx.status();
  if (*lnx == nullptr) return FieldError("linux", "is missing");
  RETURN_IF_ERROR(ParseLinux(**lnx, &out));
  return out;
}

absl::Status ForServedSentry(LaunchSpec* spec) {
  for (size_t i = 0; i < spec->mount_flags.size(); i++) {
    const std::string& f = spec->mount_flags[i];
    const size_t at = f.find(":/etc/hostname:");
    if (!absl::StartsWith(f, "--volume=") || at == std::string::npos) continue;
    std::ifstream in(f.substr(9, at - 9));
    std::string name;
    std::getline(in, name);
    if (name != spec->hostname) {
      return FieldError("mounts",
                        absl::StrCat("a bind mount at /etc/hostname whose file does "
                                     "not hold the host name (", spec->hostname,
                                     ") is not supported"));
    }
    spec->mount_flags.erase(spec->mount_flags.begin() + i);
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchSpec> ParseProcess(absl::string_view json) {
  auto parsed = ParseJson(json);
  if (!parsed.ok()) return parsed.status();
  LaunchSpec out;
  RETURN_IF_ERROR(ParseProcessObject(*parsed, &out));
  return out;
}

absl::StatusOr<LaunchSpec> ParseResourcesUpdate(absl::string_view json) {
  auto parsed = ParseJson(json);
  if (!parsed.ok()) return parsed.status();
  LaunchSpec out;
  RETURN_IF_ERROR(ParseResources(*parsed, &out));
  return out;
}

}  // namespace sandboxd::oci
