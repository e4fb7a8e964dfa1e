// `sentry serve` driven over its control channel as sandboxd drives it:
// the real sentry binary ($SBX_SENTRY), the host's / as the rootfs, and
// Debian's own programs (/bin/echo, /bin/sh, /bin/sleep).
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "proto/control.pb.h"
#include "proto/control_channel.h"

extern char** environ;

namespace sandboxd {
namespace {

using control::Request;
using control::Response;

// The descriptor number the Sentry gets its end of the channel on.
constexpr int kControlFd = 10;

std::string SentryPath() {
  const char* p = getenv("SBX_SENTRY");
  return p != nullptr ? p : "";
}

// A pipe whose ends are UniqueFds.
struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      r = UniqueFd(fds[0]);
      w = UniqueFd(fds[1]);
    }
  }
};

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, n);
  }
  return out;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (SentryPath().empty() || access(SentryPath().c_str(), X_OK) != 0) {
      GTEST_SKIP() << "no sentry binary ($SBX_SENTRY)";
    }
    auto pair = control::Channel::Pair();
    ASSERT_TRUE(pair.ok()) << pair.status();
    // As sandboxd spawns it: into a pid namespace of its own, whose init
    // it is (so that the platform's processes land there), still our child.
    std::string path = SentryPath();
    std::string fd_flag = "--control-fd=" + std::to_string(kControlFd);
    char* argv[] = {path.data(), const_cast<char*>("serve"), fd_flag.data(),
                    nullptr};
    const int theirs = pair->second.fd();
    pid_ = static_cast<pid_t>(
        syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr,
                nullptr));
    if (pid_ == 0) {
      // dup2 onto another number clears close-on-exec.
      if (dup2(theirs, kControlFd) == kControlFd) execve(path.c_str(), argv, environ);
      _exit(127);
    }
    ASSERT_GT(pid_, 0) << strerror(errno);
    ch_.emplace(std::move(pair->first));
    // pair->second closes here: the Sentry holds the only other end.
    Response hello;
    ASSERT_TRUE(ch_->Receive(&hello).ok());
    ASSERT_TRUE(hello.has_hello());
    hello_ = hello;
  }

  void TearDown() override {
    if (pid_ > 0) {
      ch_.reset();  // the Sentry sees the channel close and exits
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  // Sends `req` with `fds` and returns the response to it; responses to
  // other requests that arrive meanwhile are kept for Await.
  Response Call(Request req, const std::vector<int>& fds = {}) {
    req.set_id(next_id_++);
    absl::Status s = ch_->Send(req, fds);
    EXPECT_TRUE(s.ok()) << s;
    return Await(req.id());
  }
  uint64_t SendOnly(Request req) {
    req.set_id(next_id_++);
    absl::Status s = ch_->Send(req);
    EXPECT_TRUE(s.ok()) << s;
    return req.id();
  }
  Response Await(uint64_t id) {
    for (;;) {
      auto it = early_.find(id);
      if (it != early_.end()) {
        Response r = it->second;
        early_.erase(it);
        return r;
      }
      Response r;
      absl::Status s = ch_->Receive(&r);
      if (!s.ok()) {
        ADD_FAILURE() << "waiting for response " << id << ": " << s;
        return r;
      }
      early_[r.id()] = r;
    }
  }

  // Start with the host's / as the rootfs and `out` as stdout and stderr.
  Response Start(const std::vector<std::string>& argv, Pipe* out,
                 const std::string& hostname = "") {
    Request req;
    Request::Start* s = req.mutable_start();
    s->set_sandbox_id("sbx-test");
    for (const auto& a : argv) s->mutable_spec()->mutable_process()->add_argv(a);
    s->mutable_spec()->mutable_process()->add_env("PATH=/usr/bin:/bin");
    if (!hostname.empty()) s->mutable_spec()->set_hostname(hostname);
    UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
    Response r = Call(req, {root.get(), null.get(), out->w.get(), out->w.get()});
    out->w.reset();  // the sandbox holds the only write end
    return r;
  }

  Response Exec(const std::vector<std::string>& argv, Pipe* out) {
    Request req;
    for (const auto& a : argv) req.mutable_exec()->mutable_process()->add_argv(a);
    UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
    Response r = Call(req, {null.get(), out->w.get(), out->w.get()});
    out->w.reset();
    return r;
  }

  Response Simple(Request::MsgCase which, int arg = 0) {
    Request req;
    switch (which) {
      case Request::kWait:
        req.mutable_wait();
        break;
      case Request::kDestroy:
        req.mutable_destroy();
        break;
      case Request::kStats:
        req.mutable_stats();
        break;
      case Request::kWaitPid:
        req.mutable_wait_pid()->set_pid(arg);
        break;
      case Request::kSignal:
        req.mutable_signal()->set_signal(arg);
        break;
      default:
        ADD_FAILURE() << "not a simple request";
    }
    return Call(req);
  }

  // Waits for the Sentry process to exit; its wait status.
  int SentryExit() {
    int status = -1;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  std::optional<control::Channel> ch_;
  Response hello_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Response> early_;
};

TEST_F(ServeTest, HelloAfterPrewarmWithTimings) {
  EXPECT_EQ(hello_.id(), 0u);
  EXPECT_EQ(hello_.hello().protocol_version(), 1u);
  EXPECT_EQ(hello_.hello().platform(), "systrap");
  EXPECT_EQ(hello_.hello().sentry_pid(), pid_);
  std::vector<std::string> names;
  for (const auto& t : hello_.timings()) names.push_back(t.name());
  for (const char* want : {"host_info", "memory_file", "platform", "vdso"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

TEST_F(ServeTest, StartEchoThenWait) {
  Pipe out;
  Response r = Start({"/bin/echo", "hello", "from", "serve"}, &out);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.init_pid(), 1);
  EXPECT_GT(r.timings_size(), 0);
  EXPECT_EQ(ReadAll(out.r.get()), "hello from serve\n");
  Response w = Simple(Request::kWait);
  ASSERT_EQ(w.code(), 0) << w.message();
  EXPECT_EQ(w.exit().status_case(), v1::ExitStatus::kCode);
  EXPECT_EQ(w.exit().code(), 0);
}

TEST_F(ServeTest, FailingProgramGivesItsCode) {
  Pipe out;
  ASSERT_EQ(Start({"sh", "-c", "echo $(hostname); exit 3"}, &out, "box7").code(), 0);
  EXPECT_EQ(ReadAll(out.r.get()), "box7\n");
  Response w = Simple(Request::kWait);
  EXPECT_EQ(w.exit().code(), 3);
}

TEST_F(ServeTest, ProgramNotFoundIsAnErrorReply) {
  Pipe out;
  Response r = Start({"/no/such/program"}, &out);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_NE(r.message().find("/no/such/program: No such file or directory"),
            std::string::npos)
      << r.message();
  // The Sentry lives on and says why nothing runs.
  EXPECT_EQ(Simple(Request::kStats).code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ServeTest, EmptyArgvIsAnErrorReply) {
  Pipe out;
  Response r = Start({}, &out);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
}

TEST_F(ServeTest, SignalKillsSleep) {
  Pipe out;
  ASSERT_EQ(Start({"sleep", "100"}, &out).code(), 0);
  // Wait stays pending while Signal is served.
  uint64_t wait_id = SendOnly([] {
    Request r;
    r.mutable_wait();
    return r;
  }());
  Response s = Simple(Request::kSignal, SIGTERM);
  EXPECT_EQ(s.code(), 0) << s.message();
  Response w = Await(wait_id);
  EXPECT_EQ(w.exit().status_case(), v1::ExitStatus::kSignal);
  EXPECT_EQ(w.exit().signal(), SIGTERM);
}

TEST_F(ServeTest, DestroyKillsAndExits) {
  Pipe out;
  ASSERT_EQ(Start({"sleep", "100"}, &out).code(), 0);
  Response d = Simple(Request::kDestroy);
  EXPECT_EQ(d.code(), 0);
  EXPECT_EQ(d.exit().signal(), SIGKILL);
  int status = SentryExit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(ServeTest, ExecWaitPidAndStats) {
  Pipe init_out;
  ASSERT_EQ(Start({"sleep", "100"}, &init_out).code(), 0);
  Pipe out;
  Response e = Exec({"/bin/sh", "-c", "echo exec; echo err >&2; exit 5"}, &out);
  ASSERT_EQ(e.code(), 0) << e.message();
  EXPECT_GT(e.exec_pid(), 1);
  EXPECT_EQ(ReadAll(out.r.get()), "exec\nerr\n");
  Response w = Simple(Request::kWaitPid, e.exec_pid());
  ASSERT_EQ(w.code(), 0) << w.message();
  EXPECT_EQ(w.exit().code(), 5);

  Pipe out2;
  Response e2 = Exec({"sleep", "100"}, &out2);
  ASSERT_EQ(e2.code(), 0) << e2.message();
  Response st = Simple(Request::kStats);
  ASSERT_EQ(st.code(), 0) << st.message();
  std::vector<int> pids(st.stats().pids().begin(), st.stats().pids().end());
  EXPECT_EQ(pids, (std::vector<int>{1, e2.exec_pid()}));
  EXPECT_GE(st.stats().tasks(), 2u);
  EXPECT_GT(st.stats().memory_bytes(), 0u);

  EXPECT_EQ(Simple(Request::kWaitPid, 4242).code(),
            static_cast<int>(absl::StatusCode::kNotFound));
  Pipe out3;
  Response nf = Exec({"no-such-program"}, &out3);
  EXPECT_EQ(nf.code(), static_cast<int>(absl::StatusCode::kNotFound));

  Response d = Simple(Request::kDestroy);
  EXPECT_EQ(d.exit().signal(), SIGKILL);
  EXPECT_EQ(SentryExit(), 0);
}

// The warm Sentry's own isolation, seen from outside (DESIGN.md,
// "Processes"): namespaces of its own, no capabilities, no_new_privs.
std::string Link(const std::string& path) {
  char buf[256];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : "";
}

std::string StatusField(pid_t pid, const std::string& field) {
  UniqueFd fd(open(("/proc/" + std::to_string(pid) + "/status").c_str(),
                   O_RDONLY | O_CLOEXEC));
  std::string text = ReadAll(fd.get());
  size_t at = text.find("\n" + field + ":");
  if (at == std::string::npos) return "";
  size_t start = text.find_first_not_of(" \t", at + field.size() + 2);
  return text.substr(start, text.find('\n', start) - start);
}

TEST_F(ServeTest, SentryIsIsolatedBeforeHello) {
  const std::string self = "/proc/self/ns/";
  const std::string sentry = "/proc/" + std::to_string(pid_) + "/ns/";
  for (const char* ns : {"user", "mnt", "net", "ipc", "uts", "pid"}) {
    EXPECT_NE(Link(self + ns), "") << ns;
    EXPECT_NE(Link(self + ns), Link(sentry + ns)) << ns;
  }
  // Its children (the holder, the stub template) share its pid namespace.
  UniqueFd kids_fd(open(("/proc/" + std::to_string(pid_) + "/task/" +
                         std::to_string(pid_) + "/children")
                            .c_str(),
                        O_RDONLY | O_CLOEXEC));
  std::string kids = ReadAll(kids_fd.get());
  EXPECT_FALSE(kids.empty());
  for (size_t at = 0; at < kids.size();) {
    size_t end = kids.find(' ', at);
    std::string kid = kids.substr(at, end - at);
    at = end == std::string::npos ? kids.size() : end + 1;
    if (kid.empty() || kid == "\n") continue;
    EXPECT_EQ(Link("/proc/" + kid + "/ns/pid"), Link(sentry + "pid")) << kid;
  }
  EXPECT_EQ(StatusField(pid_, "CapEff"), "0000000000000000");
  EXPECT_EQ(StatusField(pid_, "CapPrm"), "0000000000000000");
  EXPECT_EQ(StatusField(pid_, "CapBnd"), "0000000000000000");
  EXPECT_EQ(StatusField(pid_, "NoNewPrivs"), "1");
  // Its root is an empty directory: nothing of the host's.
  UniqueFd root(open(("/proc/" + std::to_string(pid_) + "/root").c_str(),
                     O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root.valid());
  UniqueFd probe(openat(root.get(), "etc", O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(probe.valid());
}

TEST_F(ServeTest, LimitsAreVisibleInside) {
  Request req;
  Request::Start* s = req.mutable_start();
  v1::SandboxSpec* spec = s->mutable_spec();
  for (const char* a : {"/bin/sh", "-c",
                        "nproc; grep -c ^processor /proc/cpuinfo; "
                        "grep MemTotal /proc/meminfo; "
                        "sleep 5 & sleep 5 & echo after-forks; wait"}) {
    spec->mutable_process()->add_argv(a);
  }
  spec->mutable_process()->add_env("PATH=/usr/bin:/bin");
  spec->mutable_limits()->set_cpu_millis(500);            // half a CPU: 1
  spec->mutable_limits()->set_memory_bytes(256ull << 20);  // 262144 kB
  spec->mutable_limits()->set_pids(2);  // sh and one child at a time
  UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  Pipe out;
  Response r = Call(req, {root.get(), null.get(), out.w.get(), out.w.get()});
  out.w.reset();
  ASSERT_EQ(r.code(), 0) << r.message();
  std::string text = ReadAll(out.r.get());
  EXPECT_EQ(text.substr(0, text.find("MemTotal")), "1\n1\n") << text;
  size_t mem = text.find("MemTotal:");
  ASSERT_NE(mem, std::string::npos) << text;
  EXPECT_EQ(text.substr(mem, text.find('\n', mem) - mem).substr(
                text.substr(mem).find_first_of("0123456789")),
            "262144 kB");
  // The third task is one too many: sh's second background fork fails.
  EXPECT_NE(text.find("fork"), std::string::npos) << text;
  Simple(Request::kWait);
}

TEST_F(ServeTest, TtyStartGetsOneTerminalForStdio) {
  UniqueFd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  ASSERT_TRUE(master.valid());
  ASSERT_EQ(grantpt(master.get()), 0);
  ASSERT_EQ(unlockpt(master.get()), 0);
  UniqueFd replica(open(ptsname(master.get()), O_RDWR | O_NOCTTY | O_CLOEXEC));
  ASSERT_TRUE(replica.valid());
  Request req;
  v1::SandboxSpec* spec = req.mutable_start()->mutable_spec();
  for (const char* a : {"/bin/sh", "-c",
                        "test -t 0 && test -t 1 && test -t 2 && echo all-ttys"}) {
    spec->mutable_process()->add_argv(a);
  }
  spec->mutable_process()->set_tty(true);
  UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  Response r = Call(req, {root.get(), replica.get()});
  ASSERT_EQ(r.code(), 0) << r.message();
  replica.reset();
  Response w = Simple(Request::kWait);
  EXPECT_EQ(w.exit().code(), 0);
  // The sandbox has exited: its output is all in the master's buffer (the
  // Sentry still holds the replica: read without waiting for EOF).
  fcntl(master.get(), F_SETFL, O_NONBLOCK);
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(master.get(), buf, sizeof(buf))) > 0) text.append(buf, n);
  EXPECT_NE(text.find("all-ttys"), std::string::npos) << text;
}

TEST_F(ServeTest, ChannelCloseKillsTheSandbox) {
  Pipe out;
  ASSERT_EQ(Start({"sleep", "100"}, &out).code(), 0);
  ch_.reset();
  int status = SentryExit();
  EXPECT_TRUE(WIFEXITED(status)) << status;
  // Every process of the sandbox held the pipe's write end: all gone.
  EXPECT_EQ(ReadAll(out.r.get()), "");
}

TEST_F(ServeTest, PersistNeedsAListeningSocket) {
  Pipe p;
  Request req;
  req.mutable_persist();
  Response r = Call(req, {p.r.get()});
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << r.message();
}

// control.proto Persist: the sandbox outlives the channel, the next
// "daemon" connects to the socket, gets the kept descriptor back, and a
// response owed to the first channel never reaches the second.
TEST_F(ServeTest, PersistedSandboxServesTheNextChannel) {
  char dir_tmpl[] = "/tmp/serve_test.XXXXXX";
  const std::string dir = mkdtemp(dir_tmpl);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/c.sock", dir.c_str());
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener.get(), 1), 0);
  Pipe out;
  Request persist;
  persist.mutable_persist();
  ASSERT_EQ(Call(persist, {listener.get(), out.r.get()}).code(), 0);
  listener.reset();
  ASSERT_EQ(Start({"sleep", "100"}, &out).code(), 0);
  Request wait;
  wait.mutable_wait();
  const uint64_t old_wait = SendOnly(wait);

  ch_.reset();  // the "daemon" dies
  usleep(200 * 1000);
  ASSERT_EQ(kill(pid_, 0), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid_, &st, WNOHANG), 0) << "the Sentry exited with its channel";

  UniqueFd c(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_EQ(connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << strerror(errno);
  ch_.emplace(std::move(c));
  early_.clear();
  next_id_ = old_wait;  // the next daemon numbers its requests afresh
  Request reattach;
  reattach.mutable_reattach();
  reattach.set_id(next_id_++);
  ASSERT_TRUE(ch_->Send(reattach).ok());
  Response r;
  std::vector<UniqueFd> kept;
  ASSERT_TRUE(ch_->Receive(&r, &kept).ok());
  EXPECT_EQ(r.id(), reattach.id());
  EXPECT_TRUE(r.reattached().started());
  ASSERT_EQ(kept.size(), 1u);
  struct stat a, b;
  ASSERT_EQ(fstat(kept[0].get(), &a), 0);
  ASSERT_EQ(fstat(out.r.get(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "not the pipe Persist kept";

  // The init's end answers the new Wait only, once, with the signal.
  ASSERT_EQ(Simple(Request::kSignal, SIGKILL).code(), 0);
  Response w = Simple(Request::kWait);
  EXPECT_EQ(w.exit().signal(), SIGKILL);
  Response d = Simple(Request::kDestroy);
  EXPECT_TRUE(d.has_exit());
  // The earlier channel's Wait was answered (if at all) before Destroy.
  EXPECT_TRUE(early_.empty()) << "a response of the earlier channel arrived";
  EXPECT_TRUE(WIFEXITED(SentryExit()));
  unlink(addr.sun_path);
  rmdir(dir.c_str());
}

// Stats carry the platform's counters (Platform::ExportStats): after a
// program ran, hand-overs both ways are in systrap's histograms.
TEST_F(ServeTest, StatsCarryThePlatformsCounters) {
  ASSERT_EQ(hello_.hello().platform(), "systrap");
  Pipe out;
  ASSERT_EQ(Start({"/bin/sh", "-c", "for i in 1 2 3; do /bin/true; done; sleep 100"}, &out).code(), 0);
  Pipe out2;
  Response e = Exec({"/bin/true"}, &out2);
  ASSERT_EQ(e.code(), 0) << e.message();
  ASSERT_EQ(Simple(Request::kWaitPid, e.exec_pid()).code(), 0);
  Response st = Simple(Request::kStats);
  ASSERT_EQ(st.code(), 0) << st.message();
  const control::PlatformStats& p = st.stats().platform();
  EXPECT_EQ(p.platform(), "systrap");
  ASSERT_TRUE(p.has_systrap());
  auto total = [](const control::SystrapStats::Side& side) {
    uint64_t n = 0;
    for (uint64_t b : side.latency_log2_ns()) n += b;
    return n;
  };
  EXPECT_EQ(p.systrap().sentry().latency_log2_ns_size(), 32);
  // /bin/true alone makes dozens of system calls.
  EXPECT_GT(total(p.systrap().sentry()), 20u);
  EXPECT_GT(total(p.systrap().stub()), 20u);
  EXPECT_GE(p.systrap().stub_threads_awake(), 0);
}

}  // namespace
}  // namespace sandboxd
