#include "client/oci/state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace sandboxd::oci {

const char* StatusName(Status s) {
  switch (s) {
    case Status::kCreated: return "created";
    case Status::kRunning: return "running";
    case Status::kPaused: return "paused";
    case Status::kStopped: return "stopped";
  }
  return "unknown";
}

absl::Status CheckId(const std::string& id) {
  if (id.empty() || id == "." || id == ".." || id.size() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("invalid container id: \"", id, "\""));
  }
  for (char c : id) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '+' ||
          c == '-' || c == '.')) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid container id: \"", id, "\""));
    }
  }
  return absl::OkStatus();
}

std::string ContainerDir(const std::string& root, const std::string& id) {
  return absl::StrCat(root, "/", id);
}

std::string FifoPath(const std::string& root, const std::string& id) {
  return absl::StrCat(root, "/", id, "/exec.fifo");
}

std::string PausedPath(const std::string& root, const std::string& id) {
  return absl::StrCat(root, "/", id, "/paused");
}

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

std::string AnnotationsJson(const std::map<std::string, std::string>& a,
                            const char* indent) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : a) {
    absl::StrAppend(&out, first ? "\n" : ",\n", indent, "  ", JsonQuote(k),
                    ": ", JsonQuote(v));
    first = false;
  }
  if (!first) absl::StrAppend(&out, "\n", indent);
  return out + "}";
}

}  // namespace

std::string StateJson(const ContainerState& st, Status status) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"ociVersion\": \"1.0.2-dev\",\n");
  absl::StrAppend(&out, "  \"id\": ", JsonQuote(st.id), ",\n");
  absl::StrAppend(&out, "  \"pid\": ", status == Status::kStopped ? 0 : st.pid, ",\n");
  absl::StrAppend(&out, "  \"status\": \"", StatusName(status), "\",\n");
  absl::StrAppend(&out, "  \"bundle\": ", JsonQuote(st.bundle), ",\n");
  absl::StrAppend(&out, "  \"rootfs\": ", JsonQuote(st.rootfs), ",\n");
  absl::StrAppend(&out, "  \"created\": ", JsonQuote(st.created), ",\n");
  if (!st.annotations.empty()) {
    absl::StrAppend(&out, "  \"annotations\": ", AnnotationsJson(st.annotations, "  "),
                    ",\n");
  }
  absl::StrAppend(&out, "  \"owner\": \"\"\n}\n");
  return out;
}

absl::Status WriteState(const std::string& root, const ContainerState& st) {
  std::string json = absl::StrCat(
      "{\"id\": ", JsonQuote(st.id), ", \"pid\": ", st.pid,
      ", \"pidStart\": \"", st.pid_start, "\", \"bundle\": ", JsonQuote(st.bundle),
      ", \"rootfs\": ", JsonQuote(st.rootfs), ", \"created\": ",
      JsonQuote(st.created), ", \"sandboxdSocket\": ", JsonQuote(st.sandboxd_socket),
      ", \"cgroups\": [", absl::StrJoin(st.cgroups, ", ", [](std::string* out, const std::string& c) {
        out->append(JsonQuote(c));
      }), "]",
      ", \"annotations\": ",
      AnnotationsJson(st.annotations, ""), "}\n");
  const std::string dir = ContainerDir(root, st.id);
  const std::string tmp = dir + "/state.json.tmp";
  const std::string path = dir + "/state.json";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("writing ", tmp, ": ", strerror(errno)));
  }
  ssize_t n = write(fd, json.data(), json.size());
  close(fd);
  if (n != static_cast<ssize_t>(json.size()) || rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("writing ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ContainerState> ReadState(const std::string& root,
                                         const std::string& id) {
  const std::string path = ContainerDir(root, id) + "/state.json";
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("container ", id, " does not exist"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  google::protobuf::Struct s;
  if (!google::protobuf::util::JsonStringToMessage(ss.str(), &s).ok()) {
    return absl::DataLossError(absl::StrCat(path, ": not the JSON this runtime writes"));
  }
  ContainerState st;
  auto str = [&s](const char* k) {
    auto it = s.fields().find(k);
    return it == s.fields().end() ? std::string() : it->second.string_value();
  };
  st.id = str("id");
  st.bundle = str("bundle");
  st.rootfs = str("rootfs");
  st.created = str("created");
  st.sandboxd_socket = str("sandboxdSocket");
  auto pit = s.fields().find("pid");
  if (pit != s.fields().end()) st.pid = static_cast<pid_t>(pit->second.number_value());
  (void)absl::SimpleAtoi(str("pidStart"), &st.pid_start);
  auto cit = s.fields().find("cgroups");
  if (cit != s.fields().end()) {
    for (const auto& v : cit->second.list_value().values()) st.cgroups.push_back(v.string_value());
  }
  auto ait = s.fields().find("annotations");
  if (ait != s.fields().end()) {
    for (const auto& [k, v] : ait->second.struct_value().fields()) {
      st.annotations[k] = v.string_value();
    }
  }
  return st;
}

std::vector<std::string> ListIds(const std::string& root) {
  std::vector<std::string> ids;
  DIR* d = opendir(root.c_str());
  if (d == nullptr) return ids;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat sb;
    if (stat(absl::StrCat(root, "/", name, "/state.json").c_str(), &sb) == 0) {
      ids.push_back(name);
    }
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  return ids;
}

namespace {

// /proc/PID/stat's fields after the command name (field 3 on).
bool StatFields(pid_t pid, std::vector<std::string>* fields) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return false;
  *fields = absl::StrSplit(line.substr(close + 2), ' ');
  return fields->size() > 20;
}

}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  std::vector<std::string> f;
  if (pid <= 0 || !StatFields(pid, &f)) return 0;
  if (f[0] == "Z" || f[0] == "X") return 0;
  uint64_t start = 0;
  (void)absl::SimpleAtoi(f[19], &start);  // field 22
  return start;
}

Status CurrentStatus(const std::string& root, const ContainerState& st) {
  const uint64_t start = ProcessStartTime(st.pid);
  if (start == 0 || start != st.pid_start) return Status::kStopped;
  struct stat sb;
  if (stat(FifoPath(root, st.id).c_str(), &sb) == 0) return Status::kCreated;
  if (stat(PausedPath(root, st.id).c_str(), &sb) == 0) return Status::kPaused;
  return Status::kRunning;
}

std::vector<pid_t> ProcessTree(pid_t pid) {
  std::multimap<pid_t, pid_t> children;
  DIR* d = opendir("/proc");
  if (d != nullptr) {
    while (dirent* e = readdir(d)) {
      pid_t p = 0;
      if (!absl::SimpleAtoi(e->d_name, &p)) continue;
      std::vector<std::string> f;
      pid_t ppid = 0;
      if (StatFields(p, &f) && absl::SimpleAtoi(f[1], &ppid)) {
        children.emplace(ppid, p);
      }
    }
    closedir(d);
  }
  std::vector<pid_t> out{pid};
  for (size_t i = 0; i < out.size(); i++) {
    auto [b, e] = children.equal_range(out[i]);
    for (auto it = b; it != e; ++it) out.push_back(it->second);
  }
  return out;
}

std::string NowRfc3339() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t;
  gmtime_r(&ts.tv_sec, &t);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", t.tm_year + 1900,
                         t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                         ts.tv_nsec);
}

}  // namespace sandboxd::oci
