#include "base/flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::flags {
namespace {

using Strings = std::vector<std::string>;

struct Opts {
  std::string rootfs = "/";
  int pool = 2;
  uint64_t pids = 0;
  bool strace = false;
  bool patch = false;
  std::vector<std::string> env;
  std::string mode = "zap";
  bool it = false;
};

void Declare(FlagSet& fs, Opts& o) {
  fs.String("rootfs", &o.rootfs, "DIR", "the root");
  fs.Int("pool-size", &o.pool, "warm Sentries");
  fs.Positive("pids", &o.pids, "most tasks");
  fs.Bool("strace", &o.strace, "print syscalls");
  fs.OnOff("systrap-patch", &o.patch, "patch syscalls");
  fs.Repeated("env", &o.env, "K=V", "a variable");
  fs.Alias("-e", "env");
  fs.Func("kvm-shadow", "zap|flush", "shadow mode",
          [&o](absl::string_view v) {
            if (v != "zap" && v != "flush") {
              return absl::InvalidArgumentError("wants zap or flush");
            }
            o.mode = std::string(v);
            return absl::OkStatus();
          },
          "zap");
  fs.BoolFunc("it", "interactive tty", [&o] { o.it = true; });
  fs.Alias("-ti", "it");
}

TEST(FlagsTest, BothValueSpellingsBooleansAndRepeats) {
  FlagSet fs("sentry run", "[FLAGS] -- PROGRAM");
  Opts o;
  Declare(fs, o);
  auto rest = fs.Parse({"--rootfs=/r", "--pool-size", "5", "--strace", "--env=A=1",
                        "-e", "B=2", "--systrap-patch=on", "--kvm-shadow=flush",
                        "--pids=7", "-ti", "prog", "--strace"});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(*rest, (Strings{"prog", "--strace"}));  // flags end at PROGRAM
  EXPECT_EQ(o.rootfs, "/r");
  EXPECT_EQ(o.pool, 5);
  EXPECT_EQ(o.pids, 7u);
  EXPECT_TRUE(o.strace);
  EXPECT_TRUE(o.patch);
  EXPECT_TRUE(o.it);
  EXPECT_EQ(o.env, (Strings{"A=1", "B=2"}));
  EXPECT_EQ(o.mode, "flush");
  EXPECT_FALSE(fs.help_requested());
}

TEST(FlagsTest, DoubleDashEndsFlags) {
  FlagSet fs("x", "");
  Opts o;
  Declare(fs, o);
  auto rest = fs.Parse({"--strace", "--", "--rootfs=/r", "-"});
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, (Strings{"--rootfs=/r", "-"}));
  EXPECT_EQ(o.rootfs, "/");
  auto dash = fs.Parse({"-", "a"});
  ASSERT_TRUE(dash.ok());
  EXPECT_EQ(*dash, (Strings{"-", "a"}));
}

TEST(FlagsTest, DefaultsStayWhenUnset) {
  FlagSet fs("x", "");
  Opts o;
  Declare(fs, o);
  auto rest = fs.Parse({});
  ASSERT_TRUE(rest.ok());
  EXPECT_TRUE(rest->empty());
  EXPECT_EQ(o.rootfs, "/");
  EXPECT_EQ(o.pool, 2);
  EXPECT_FALSE(o.patch);
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  auto err = [](const Strings& args) {
    FlagSet fs("sandboxd", "[FLAGS]");
    Opts o;
    Declare(fs, o);
    auto r = fs.Parse(args);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_EQ(err({"--nope=1"}), "unknown flag: --nope (sandboxd --help lists the flags)");
  EXPECT_EQ(err({"-z"}), "unknown flag: -z (sandboxd --help lists the flags)");
  EXPECT_EQ(err({"--pool-size=-1"}),
            "--pool-size: wants a non-negative number, got \"-1\"");
  EXPECT_EQ(err({"--pids=0"}), "--pids: wants a positive number, got \"0\"");
  EXPECT_EQ(err({"--systrap-patch=maybe"}),
            "--systrap-patch: wants on or off, got \"maybe\"");
  EXPECT_EQ(err({"--kvm-shadow=x"}), "--kvm-shadow: wants zap or flush");
  EXPECT_EQ(err({"--rootfs"}), "--rootfs wants a value (--rootfs=DIR)");
  EXPECT_EQ(err({"--strace=yes"}), "--strace takes no value, got \"yes\"");
}

TEST(FlagsTest, HelpIsGenerated) {
  FlagSet fs("sentry run", "[FLAGS] -- PROGRAM [ARGS...]", "Runs one program.");
  Opts o;
  Declare(fs, o);
  fs.set_footer("exit status: the program's\n");
  auto rest = fs.Parse({"--strace", "--help", "--nope"});
  ASSERT_TRUE(rest.ok());
  EXPECT_TRUE(fs.help_requested());
  const std::string h = fs.Help();
  EXPECT_EQ(h.rfind("usage: sentry run [FLAGS] -- PROGRAM [ARGS...]\n", 0), 0u) << h;
  for (const char* want :
       {"Runs one program.", "--rootfs=DIR", "the root (default: /)",
        "--pool-size=N", "(default: 2)", "--env=K=V, -e", "a variable (repeatable)",
        "--systrap-patch=on|off", "(default: off)", "--kvm-shadow=zap|flush",
        "(default: zap)", "--it, -ti", "exit status: the program's"}) {
    EXPECT_NE(h.find(want), std::string::npos) << want << "\n" << h;
  }
}

}  // namespace
}  // namespace sandboxd::flags
