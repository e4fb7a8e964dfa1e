// Links every system library the project uses and runs the static programs.
#include <elf.h>
#include <fcntl.h>
#include <seccomp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/control.pb.h"
#include "proto/sandbox.grpc.pb.h"
#include "proto/sandbox.pb.h"

int SmokeSpecial();

namespace {

TEST(Smoke, Absl) {
  absl::flat_hash_map<std::string, int> m{{"a", 1}};
  EXPECT_EQ(absl::StrFormat("%s=%d", "a", m["a"]), "a=1");
  EXPECT_EQ(sandboxd::ErrnoStatus("x", ENOENT).code(), absl::StatusCode::kNotFound);
}

TEST(Smoke, Seccomp) {
  const scmp_version* v = seccomp_version();
  ASSERT_NE(v, nullptr);
  EXPECT_GE(v->major, 2u);
}

TEST(Smoke, Proto) {
  sandboxd::control::Request req;
  req.set_id(3);
  req.mutable_start()->mutable_spec()->mutable_process()->add_argv("/bin/true");
  std::string wire;
  ASSERT_TRUE(req.SerializeToString(&wire));
  sandboxd::control::Request back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.start().spec().process().argv(0), "/bin/true");
}

TEST(Smoke, Grpc) {
  auto channel = grpc::CreateChannel("unix:/nonexistent.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = sandboxd::v1::Sandboxes::NewStub(channel);
  EXPECT_NE(stub, nullptr);
}

TEST(Smoke, SpecialCopts) { EXPECT_EQ(SmokeSpecial(), 7); }

// Runs a data dependency; checks it is a static ELF (no PT_INTERP) and exits 42.
void RunStatic(const std::string& name) {
  std::string path = "tools/bazel/smoke/" + name;  // cwd = runfiles root
  sandboxd::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << path;
  Elf64_Ehdr eh;
  ASSERT_EQ(pread(fd.get(), &eh, sizeof eh, 0), (ssize_t)sizeof eh);
  for (int i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    ASSERT_EQ(pread(fd.get(), &ph, sizeof ph, eh.e_phoff + i * sizeof ph),
              (ssize_t)sizeof ph);
    EXPECT_NE(ph.p_type, (Elf64_Word)PT_INTERP) << name << " is dynamic";
  }
  int status = std::system((path + " >/dev/null").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
}

TEST(Smoke, StaticGlibc) { RunStatic("hello_glibc"); }
TEST(Smoke, StaticMusl) { RunStatic("hello_musl"); }

}  // namespace
