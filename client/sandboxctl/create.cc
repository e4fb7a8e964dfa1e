// sandboxctl create (prints the new sandbox's id) and start ID.
#include <cstdio>

#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Create(Client& c, std::vector<std::string> args) {
  v1::CreateRequest req;
  bool tty = false, interactive = false;
  flags::FlagSet fs("sandboxctl create", "[FLAGS] [--] PROGRAM [ARGS...]",
                    "creates a sandbox and prints its id; start runs it");
  fs.Bool("tty", &tty, "give the program a terminal");
  fs.Alias("-t", "tty");
  fs.Bool("interactive", &interactive, "keep the init's stdin open for attach");
  fs.Alias("-i", "interactive");
  SpecFlags(fs, &req);
  // Parsed first: FinishSpec reads the flags' values.
  std::vector<std::string> program = Program(ParseFlags(fs, std::move(args)), 0, "create");
  FinishSpec(&req, std::move(program), tty);
  req.mutable_spec()->set_open_stdin(interactive);
  call_started = absl::Now();
  absl::StatusOr<v1::CreateResponse> created = c.Create(req);
  FailOn(created.status());
  printf("%s\n", created->id().c_str());
  return 0;
}

int Start(Client& c, std::vector<std::string> args) {
  flags::FlagSet fs("sandboxctl start", "ID", "starts a created sandbox's init");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "start: which sandbox? (start ID)");
  absl::Status s = c.Start(rest[0]);
  if (!s.ok()) Fail(StartFailureCode(s), std::string(s.message()));
  return 0;
}

}  // namespace sandboxd::client::ctl
