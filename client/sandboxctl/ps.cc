// sandboxctl ps (list, ls): the running sandboxes (-a: all), as a table
// whose columns are as wide as their widest value, ids or JSON.
#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Ps(Client& c, std::vector<std::string> args) {
  bool json = false, quiet = false, all = false;
  std::map<std::string, std::string> labels;
  flags::FlagSet fs("sandboxctl ps", "[FLAGS]", "lists the sandboxes");
  fs.Bool("json", &json, "as JSON (sandboxd.v1.ListResponse)");
  fs.Bool("quiet", &quiet, "ids only");
  fs.Alias("-q", "quiet");
  fs.Bool("all", &all, "every sandbox, not only the running ones");
  fs.Alias("-a", "all");
  fs.Func("label", "K=V", "only sandboxes with this label (repeatable)",
          [&labels](absl::string_view v) {
            std::string k, val;
            if (!KeyValue(std::string(v), &k, &val)) {
              return absl::InvalidArgumentError(absl::StrCat("wants K=V, got ", v));
            }
            labels[k] = val;
            return absl::OkStatus();
          });
  fs.Alias("-l", "label");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (!rest.empty()) Fail(kExitError, absl::StrCat("ps: unknown argument: ", rest[0]));
  absl::StatusOr<std::vector<v1::SandboxInfo>> list = c.List(labels);
  FailOn(list.status());
  // As docker ps: the running ones unless -a.
  if (!all) {
    list->erase(std::remove_if(list->begin(), list->end(),
                               [](const v1::SandboxInfo& s) {
                                 return s.state() != v1::SANDBOX_STATE_RUNNING &&
                                        s.state() != v1::SANDBOX_STATE_PAUSED;
                               }),
                list->end());
  }
  if (json) {
    v1::ListResponse r;
    for (auto& s : *list) *r.add_sandboxes() = s;
    std::string out = ToJson(r);
    // An empty list prints as {} (proto3 omits empty fields): spell it out.
    if (list->empty()) out = "{\n \"sandboxes\": []\n}\n";
    fputs(out.c_str(), stdout);
    return 0;
  }
  if (quiet) {
    for (auto& s : *list) printf("%s\n", s.id().c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATE", "PLATFORM", "CREATED", "STATUS", "COMMAND"}};
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  for (auto& s : *list) {
    absl::string_view state_name = v1::SandboxState_Name(s.state());
    absl::ConsumePrefix(&state_name, "SANDBOX_STATE_");
    // A sandbox a checkpoint ended is STOPPED with its image to restore
    // from: shown as such, as podman's Checkpointed state does.
    const std::string state = s.has_checkpoint() ? "checkpointed" : std::string(state_name);
    const int64_t age = now - s.timings().created().seconds();
    std::string created = age < 120 ? absl::StrCat(age, "s ago")
                          : age < 7200 ? absl::StrCat(age / 60, "m ago")
                                       : absl::StrCat(age / 3600, "h ago");
    std::string status = s.has_checkpoint() ? absl::StrCat("image ", s.checkpoint().image_dir())
                         : s.has_exit()     ? ExitText(s.exit())
                                            : "";
    if (s.has_restore() && !s.restore().done() && s.state() == v1::SANDBOX_STATE_RUNNING) {
      status = s.restore().bytes_total() > 0
                   ? absl::StrCat("loading ", 100 * s.restore().bytes_loaded() /
                                                  s.restore().bytes_total(), "%")
                   : "loading";
    }
    rows.push_back({s.id(), absl::AsciiStrToLower(state), s.spec().platform(), created,
                    status, absl::StrJoin(s.spec().process().argv(), " ")});
  }
  // Each column as wide as its widest cell: a long id or status never
  // pushes the columns after it out of line.
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); i++) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); i++) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace sandboxd::client::ctl
