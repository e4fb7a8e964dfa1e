// A sandbox from C++ in one call: runs `sh -c 'echo hello from $(hostname)'`
// in a new sandbox of the daemon at $SANDBOXD_SOCKET (or the default
// socket), prints its output and exits with its status. Built against the
// installed library (client/README.md, "Installing the clients"):
//
//   c++ -std=c++17 -o hello hello.cc $(pkg-config --cflags --libs sandboxd-client)
//   ./hello [ROOTFS]
#include <cstdio>
#include <string>
#include <unistd.h>

#include "client/client.h"

namespace c = sandboxd::client;

int main(int argc, char** argv) {
  c::ConnectOptions options;
  options.socket = c::SocketFromEnv("");
  auto client = c::Client::Connect(options);
  if (!client.ok()) {
    fprintf(stderr, "hello: %s\n", std::string(client.status().message()).c_str());
    return 125;
  }

  sandboxd::v1::CreateRequest req;
  sandboxd::v1::SandboxSpec* spec = req.mutable_spec();
  if (argc > 1) spec->set_rootfs(argv[1]);  // "": the daemon's default image
  spec->set_hostname("hello-box");
  for (const char* a : {"/bin/sh", "-c", "echo hello from $(hostname)"}) {
    spec->mutable_process()->add_argv(a);
  }

  c::ExecIo io;
  io.remove = true;  // the daemon destroys the sandbox when the call ends
  io.on_stdout = [](absl::string_view data) {
    (void)!write(STDOUT_FILENO, data.data(), data.size());
  };
  io.on_stderr = [](absl::string_view data) {
    (void)!write(STDERR_FILENO, data.data(), data.size());
  };
  auto exit = (*client)->CreateAndAttach(req, std::move(io));
  if (!exit.ok()) {
    fprintf(stderr, "hello: %s\n", std::string(exit.status().message()).c_str());
    return 125;
  }
  return c::ExitCode(*exit);
}
