#include "platforms/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sandboxd::platform {

const OptionFlag* Backend::FindFlag(absl::string_view flag) const {
  for (const OptionFlag& f : flags) {
    if (f.name == flag) return &f;
  }
  return nullptr;
}

absl::Status Backend::CheckOption(absl::string_view flag,
                                  absl::string_view value) const {
  const OptionFlag* f = FindFlag(flag);
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " is not an option of platform ", name));
  }
  if (f->check == nullptr) return absl::OkStatus();
  return f->check(value);
}

void Registry::Add(Backend b) {
  for (const Backend& o : backends_) {
    if (o.name == b.name) return;  // registered once
  }
  backends_.push_back(std::move(b));
}

absl::Status Registry::InitProcess() const {
  for (const Backend& b : backends_) {
    if (b.init_process == nullptr) continue;
    if (absl::Status s = b.init_process(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

const Backend* Registry::Find(absl::string_view name) const {
  for (const Backend& b : backends_) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

absl::StatusOr<const Backend*> Registry::Lookup(absl::string_view name) const {
  if (const Backend* b = Find(name)) return b;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown platform: ", name, " (available: ", NamesJoined(", "), ")"));
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> names;
  for (const Backend& b : backends_) names.push_back(b.name);
  return names;
}

std::string Registry::NamesJoined(absl::string_view sep) const {
  return absl::StrJoin(Names(), sep);
}

const Backend* Registry::OwnerOfFlag(absl::string_view flag) const {
  for (const Backend& b : backends_) {
    if (b.FindFlag(flag) != nullptr) return &b;
  }
  return nullptr;
}

absl::StatusOr<OptionValues> Registry::OptionsFor(
    const Backend& backend, const OptionValues& options) const {
  OptionValues mine;
  for (const auto& [flag, value] : options) {
    if (backend.FindFlag(flag) != nullptr) {
      if (absl::Status s = backend.CheckOption(flag, value); !s.ok()) return s;
      mine[flag] = value;
      continue;
    }
    const Backend* owner = OwnerOfFlag(flag);
    if (owner == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": no platform has this option"));
    }
    if (absl::Status s = owner->CheckOption(flag, value); !s.ok()) return s;
    const OptionFlag& f = *owner->FindFlag(flag);
    if (!f.ignored_elsewhere && value != f.default_value) {
      return absl::FailedPreconditionError(
          absl::StrCat("--", flag, "=", value, ": an option of platform ",
                       owner->name, ", not of ", backend.name));
    }
  }
  return mine;
}

}  // namespace sandboxd::platform
