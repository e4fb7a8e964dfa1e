#include "base/flags.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sandboxd::flags {

FlagSet::FlagSet(std::string command, std::string synopsis,
                 std::string description)
    : command_(std::move(command)),
      synopsis_(std::move(synopsis)),
      description_(std::move(description)) {}

FlagSet::Flag& FlagSet::Add(
    std::string name, std::string value_name, std::string help,
    std::string default_text,
    std::function<absl::Status(absl::string_view)> set) {
  auto f = std::make_unique<Flag>();
  f->name = std::move(name);
  f->value_name = std::move(value_name);
  f->help = std::move(help);
  f->default_text = std::move(default_text);
  f->set = std::move(set);
  Flag* p = f.get();
  by_spelling_[absl::StrCat("--", p->name)] = p;
  flags_.push_back(std::move(f));
  return *p;
}

void FlagSet::String(std::string name, std::string* out,
                     std::string value_name, std::string help) {
  Add(std::move(name), std::move(value_name), std::move(help), *out,
      [out](absl::string_view v) {
        *out = std::string(v);
        return absl::OkStatus();
      });
}

void FlagSet::Int(std::string name, int* out, std::string help) {
  Add(std::move(name), "N", std::move(help), absl::StrCat(*out),
      [out](absl::string_view v) {
        int n = 0;
        if (!absl::SimpleAtoi(v, &n) || n < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("wants a non-negative number, got \"", v, "\""));
        }
        *out = n;
        return absl::OkStatus();
      });
}

void FlagSet::Positive(std::string name, uint64_t* out, std::string help) {
  Add(std::move(name), "N", std::move(help), *out == 0 ? "" : absl::StrCat(*out),
      [out](absl::string_view v) {
        uint64_t n = 0;
        if (!absl::SimpleAtoi(v, &n) || n == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("wants a positive number, got \"", v, "\""));
        }
        *out = n;
        return absl::OkStatus();
      });
}

void FlagSet::Bool(std::string name, bool* out, std::string help) {
  Add(std::move(name), "", std::move(help), "", [out](absl::string_view) {
    *out = true;
    return absl::OkStatus();
  });
}

void FlagSet::OnOff(std::string name, bool* out, std::string help) {
  Add(std::move(name), "on|off", std::move(help), *out ? "on" : "off",
      [out](absl::string_view v) {
        if (v != "on" && v != "off") {
          return absl::InvalidArgumentError(
              absl::StrCat("wants on or off, got \"", v, "\""));
        }
        *out = v == "on";
        return absl::OkStatus();
      });
}

void FlagSet::Repeated(std::string name, std::vector<std::string>* out,
                       std::string value_name, std::string help) {
  Add(std::move(name), std::move(value_name),
      absl::StrCat(help, " (repeatable)"), "", [out](absl::string_view v) {
        out->emplace_back(v);
        return absl::OkStatus();
      });
}

void FlagSet::Func(std::string name, std::string value_name, std::string help,
                   std::function<absl::Status(absl::string_view)> set,
                   std::string default_text) {
  Add(std::move(name), std::move(value_name), std::move(help),
      std::move(default_text), std::move(set));
}

void FlagSet::BoolFunc(std::string name, std::string help,
                       std::function<void()> set) {
  Add(std::move(name), "", std::move(help), "",
      [set = std::move(set)](absl::string_view) {
        set();
        return absl::OkStatus();
      });
}

void FlagSet::Alias(std::string spelling, absl::string_view name) {
  Flag* f = Find(absl::StrCat("--", name));
  if (f == nullptr) return;
  f->aliases.push_back(spelling);
  by_spelling_[std::move(spelling)] = f;
}

FlagSet::Flag* FlagSet::Find(absl::string_view token) {
  auto it = by_spelling_.find(token);
  return it == by_spelling_.end() ? nullptr : it->second;
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(
    const std::vector<std::string>& args) {
  size_t i = 0;
  for (; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--") {
      i++;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the first argument
    if (a == "--help" || a == "-h") {
      help_requested_ = true;
      return std::vector<std::string>();
    }
    absl::string_view token = a;
    absl::string_view value;
    bool has_value = false;
    Flag* f = Find(token);
    if (f == nullptr) {
      if (size_t eq = token.find('='); eq != absl::string_view::npos) {
        value = token.substr(eq + 1);
        token = token.substr(0, eq);
        has_value = true;
        f = Find(token);
      }
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag: ", token, " (", command_,
                       " --help lists the flags)"));
    }
    std::string v;
    if (f->value_name.empty()) {
      if (has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat(token, " takes no value, got \"", value, "\""));
      }
    } else if (has_value) {
      v = std::string(value);
    } else {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            token, " wants a value (", token, "=", f->value_name, ")"));
      }
      v = args[++i];
    }
    if (absl::Status s = f->set(v); !s.ok()) {
      // A message that names its flag already ("--kvm-fpu wants ...")
      // stands as it is.
      if (absl::StartsWith(s.message(), "--")) return s;
      return absl::Status(s.code(), absl::StrCat("--", f->name, ": ", s.message()));
    }
  }
  return std::vector<std::string>(args.begin() + i, args.end());
}

std::vector<std::string> FlagSet::ParseOrExit(
    const std::vector<std::string>& args, int exit_code) {
  absl::StatusOr<std::vector<std::string>> rest = Parse(args);
  if (help_requested_) {
    fputs(Help().c_str(), stdout);
    fflush(stdout);
    exit(0);
  }
  if (!rest.ok()) {
    const std::string program = command_.substr(0, command_.find(' '));
    fprintf(stderr, "%s: %s\n", program.c_str(),
            std::string(rest.status().message()).c_str());
    fflush(stderr);
    exit(exit_code);
  }
  return *std::move(rest);
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: ", command_, " ", synopsis_, "\n");
  if (!description_.empty()) absl::StrAppend(&out, "\n", description_, "\n");
  if (!flags_.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const auto& f : flags_) {
    std::string spelling = absl::StrCat("--", f->name);
    if (!f->value_name.empty()) absl::StrAppend(&spelling, "=", f->value_name);
    for (const std::string& a : f->aliases) absl::StrAppend(&spelling, ", ", a);
    std::string line = absl::StrCat("  ", spelling);
    if (line.size() < 30) {
      line.resize(30, ' ');
    } else {
      absl::StrAppend(&line, "\n", std::string(30, ' '));
    }
    absl::StrAppend(&line, f->help);
    if (!f->default_text.empty()) {
      absl::StrAppend(&line, " (default: ", f->default_text, ")");
    }
    absl::StrAppend(&out, line, "\n");
  }
  if (!footer_.empty()) absl::StrAppend(&out, "\n", footer_);
  return out;
}

std::vector<std::string> Args(int argc, char** argv, int first) {
  std::vector<std::string> v;
  for (int i = first; i < argc; i++) v.emplace_back(argv[i]);
  return v;
}

}  // namespace sandboxd::flags
