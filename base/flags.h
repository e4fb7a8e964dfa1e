// Command-line flags of one command (sentry run, sandboxd, sandboxctl exec,
// ...): typed flags with defaults and help, a generated --help, and errors
// that name the flag. A FlagSet per command rather than absl/flags, whose
// flags are process-global and so one set for all of a binary's
// subcommands.
//
//   FlagSet fs("sentry run", "[FLAGS] [--] PROGRAM [ARGS...]");
//   fs.String("rootfs", &o.rootfs, "DIR", "the sandbox's root directory");
//   fs.Repeated("env", &o.env, "K=V", "an environment variable");
//   fs.Bool("strace", &o.strace, "print every syscall");
//   std::vector<std::string> program = fs.ParseOrExit(args, 125);
//
// Syntax: --name=VALUE or --name VALUE; a boolean is --name alone; an
// alias (Alias) is another spelling of a flag, like -e for --env. Flags
// come first: parsing ends at "--" (dropped) or at the first argument that
// is not a flag (kept, with everything after it). `-` alone is an argument.
#ifndef SANDBOXD_BASE_FLAGS_H_
#define SANDBOXD_BASE_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sandboxd::flags {

class FlagSet {
 public:
  // `command` names the command in help and errors ("sandboxctl run");
  // its first word prefixes errors ("sandboxctl: ..."). `synopsis` follows
  // it on the usage line.
  FlagSet(std::string command, std::string synopsis,
          std::string description = "");
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Each flag's default is what `*out` holds when it is declared. `name`
  // is without the leading "--".
  void String(std::string name, std::string* out, std::string value_name,
              std::string help);
  // A non-negative decimal number.
  void Int(std::string name, int* out, std::string help);
  // A positive decimal number.
  void Positive(std::string name, uint64_t* out, std::string help);
  // --name sets *out to true.
  void Bool(std::string name, bool* out, std::string help);
  // --name=on|off.
  void OnOff(std::string name, bool* out, std::string help);
  // Each --name=VALUE is appended.
  void Repeated(std::string name, std::vector<std::string>* out,
                std::string value_name, std::string help);
  // A value that `set` checks (InvalidArgument saying what the flag wants;
  // the parser adds the flag's name) and stores. `default_text` is shown
  // in --help ("" for none).
  void Func(std::string name, std::string value_name, std::string help,
            std::function<absl::Status(absl::string_view value)> set,
            std::string default_text = "");
  // A flag without a value that runs `set`.
  void BoolFunc(std::string name, std::string help,
                std::function<void()> set);
  // `spelling` ("-e", "-it") is another way to write --name.
  void Alias(std::string spelling, absl::string_view name);
  // Extra text at the end of --help.
  void set_footer(std::string footer) { footer_ = std::move(footer); }

  // Parses `args` (without the program name). Returns the arguments after
  // the flags. InvalidArgument for an unknown flag, a missing or bad value.
  absl::StatusOr<std::vector<std::string>> Parse(
      const std::vector<std::string>& args);
  // Whether Parse saw --help or -h (it then stops and returns OK).
  bool help_requested() const { return help_requested_; }

  // Parse, for a main(): --help prints Help() on stdout and exits 0; an
  // error prints "PROGRAM: MESSAGE" and a pointer to --help on stderr and
  // exits with `exit_code`.
  std::vector<std::string> ParseOrExit(const std::vector<std::string>& args,
                                       int exit_code);

  // The usage line and every flag with its value, default and help.
  std::string Help() const;
  const std::string& command() const { return command_; }

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty: takes no value
    std::string help;
    std::string default_text;
    std::vector<std::string> aliases;
    std::function<absl::Status(absl::string_view)> set;
  };
  Flag& Add(std::string name, std::string value_name, std::string help,
            std::string default_text,
            std::function<absl::Status(absl::string_view)> set);
  // The flag `token` ("--env", "-e") names, or null.
  Flag* Find(absl::string_view token);

  std::string command_, synopsis_, description_, footer_;
  std::vector<std::unique_ptr<Flag>> flags_;  // declaration order (--help)
  std::map<std::string, Flag*, std::less<>> by_spelling_;
  bool help_requested_ = false;
};

// argv[first..argc) as strings.
std::vector<std::string> Args(int argc, char** argv, int first = 1);

}  // namespace sandboxd::flags

#endif  // SANDBOXD_BASE_FLAGS_H_
