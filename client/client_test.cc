// sandboxd end to end: a real daemon (out/bin/sandboxd with out/bin/sentry)
// on a private socket, state directory and cgroup parent, driven over gRPC
// with the client library. Skipped until both binaries exist.
#include "client/client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace client {
namespace {

// The binaries: $SBX_SANDBOXD and $SBX_SENTRY (CMake), else Bazel's
// runfiles, else out/bin.
std::string Binary(const char* env, const char* package, const char* name) {
  if (const char* p = getenv(env)) return p;
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* ws = getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) return absl::StrCat(srcdir, "/", ws, "/", package, "/", name);
  return absl::StrCat("out/bin/", name);
}
std::string SandboxdPath() { return Binary("SBX_SANDBOXD", "daemon", "sandboxd"); }
std::string SentryPath() { return Binary("SBX_SENTRY", "sentry", "sentry"); }

bool HaveBinaries() {
  return access(SandboxdPath().c_str(), X_OK) == 0 && access(SentryPath().c_str(), X_OK) == 0;
}

// One sandboxd for one test: its own socket, state dir and cgroup parent
// (CTest runs tests in parallel).
class Daemon {
 public:
  explicit Daemon(std::vector<std::string> extra = {}, std::string dir = "") {
    if (dir.empty()) {
      char tmpl[] = "/tmp/sandboxd_test.XXXXXX";
      dir = mkdtemp(tmpl);
      owns_dir_ = true;
    }
    dir_ = dir;
    socket_ = dir_ + "/sandboxd.sock";
    cgroup_parent_ = absl::StrCat("sandboxd-test-", getpid(), "-", counter_++);
    args_ = {SandboxdPath(), "--sentry=" + SentryPath(), "--socket=" + socket_, "--state-dir=" + dir_ + "/state",
             "--cgroup-parent=" + cgroup_parent_, "--metrics-address=127.0.0.1:0",
             // Nothing of a test outlives its daemon.
             "--shutdown-kill"};
    for (auto& e : extra) args_.push_back(e);
    Start();
  }
  ~Daemon() {
    Stop();
    if (owns_dir_) std::filesystem::remove_all(dir_);
  }

  void Start() {
    log_ = dir_ + "/sandboxd.log";
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args_) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // The channel is made once the socket exists: one made earlier would
    // sit in gRPC's reconnect backoff (a second or more) after its first
    // failed connect.
    for (int i = 0; i < 600 && access(socket_.c_str(), F_OK) != 0; i++) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ConnectOptions o;
    o.socket = socket_;
    client_ = std::move(*Client::Connect(o));
    for (int i = 0; i < 300; i++) {
      if (client_->Health(absl::Seconds(1)).ok()) return;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "sandboxd did not come up; its log:\n" << Log();
  }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status;
      waitpid(pid_, &status, 0);
      pid_ = 0;
    }
  }
  void KillHard() {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }

  std::string Log() const {
    std::ifstream f(log_);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  // "http://host:port" of /metrics, from the daemon's log line.
  std::string MetricsAddress() const {
    std::string log = Log();
    size_t at = log.find("metrics at http://");
    if (at == std::string::npos) return "";
    at += strlen("metrics at http://");
    return log.substr(at, log.find('/', at) - at);
  }

  Client& c() { return *client_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  const std::string& cgroup_parent() const { return cgroup_parent_; }

 private:
  static inline int counter_ = 0;
  std::string dir_, socket_, cgroup_parent_, log_;
  std::vector<std::string> args_;
  pid_t pid_ = 0;
  bool owns_dir_ = false;
  std::unique_ptr<Client> client_;
};

v1::CreateRequest Spec(std::vector<std::string> argv) {
  v1::CreateRequest req;
  req.mutable_spec()->set_rootfs("/");
  for (auto& a : argv) req.mutable_spec()->mutable_process()->add_argv(a);
  req.mutable_spec()->mutable_process()->add_env("PATH=/usr/bin:/bin");
  return req;
}

struct RunResult {
  absl::Status status;
  v1::ExitStatus exit;
  std::string out, err;
};

RunResult Attach(Client& c, const std::string& id, const std::string& stdin_data = "") {
  RunResult r;
  ExecIo io;
  io.stdin_data = stdin_data;
  io.on_stdout = [&](absl::string_view d) { r.out.append(d.data(), d.size()); };
  io.on_stderr = [&](absl::string_view d) { r.err.append(d.data(), d.size()); };
  absl::StatusOr<v1::ExitStatus> e = c.Exec(id, true, {}, io);
  r.status = e.status();
  if (e.ok()) r.exit = *e;
  return r;
}

RunResult RunProgram(Client& c, std::vector<std::string> argv, const std::string& stdin_data = "") {
  absl::StatusOr<v1::CreateResponse> created = c.Create(Spec(argv));
  if (!created.ok()) return RunResult{created.status()};
  RunResult r = Attach(c, created->id(), stdin_data);
  EXPECT_TRUE(c.Destroy(created->id()).ok());
  return r;
}

#define SKIP_WITHOUT_BINARIES()                                              \
  if (!HaveBinaries()) GTEST_SKIP() << "no " << SandboxdPath() << " or " << SentryPath(); \
  static_cast<void>(0)

TEST(SandboxdTest, RunsAProgramAndReportsItsExit) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  RunResult r = RunProgram(d.c(), {"/bin/echo", "hello", "world"});
  ASSERT_TRUE(r.status.ok()) << r.status << "\n" << d.Log();
  EXPECT_EQ(r.out, "hello world\n");
  EXPECT_EQ(r.exit.code(), 0);
  EXPECT_TRUE(r.exit.error().empty()) << r.exit.error();

  r = RunProgram(d.c(), {"/bin/sh", "-c", "echo to-stderr >&2; exit 3"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.err, "to-stderr\n");
  EXPECT_EQ(r.exit.code(), 3);

  r = RunProgram(d.c(), {"/bin/sh", "-c", "kill -9 $$"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.exit.status_case(), v1::ExitStatus::kSignal);
  EXPECT_EQ(r.exit.signal(), 9);
}

TEST(SandboxdTest, StdinReachesTheProgram) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  std::string big;
  for (int i = 0; i < 20000; i++) big += absl::StrCat("line ", i, "\n");
  RunResult r = RunProgram(d.c(), {"/bin/cat"}, big);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.out.size(), big.size());
  EXPECT_TRUE(r.out == big);
  EXPECT_EQ(r.exit.code(), 0);
}

TEST(SandboxdTest, BadRequestsNameTheField) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  auto code_and_message = [](const absl::Status& s, absl::StatusCode code,
                             const std::string& field) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), field)) << s;
  };
  v1::CreateRequest req = Spec({"/bin/true"});
  req.mutable_spec()->set_rootfs("relative/dir");
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kInvalidArgument, "spec.rootfs");
  req = Spec({"/bin/true"});
  req.mutable_spec()->set_rootfs("/nonexistent-rootfs");
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kInvalidArgument, "spec.rootfs");
  req = Spec({});
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kInvalidArgument,
                   "spec.process.argv");
  req = Spec({"/bin/true"});
  req.mutable_spec()->set_platform("vax");
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kInvalidArgument,
                   "spec.platform");
  req = Spec({"/bin/true"});
  req.mutable_spec()->mutable_process()->add_env("NOEQUALS");
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kInvalidArgument,
                   "spec.process.env[1]");
  req = Spec({"/bin/true"});
  req.set_id("bad/id");
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kInvalidArgument, "id");

  code_and_message(d.c().Get("nope").status(), absl::StatusCode::kNotFound, "nope");
  code_and_message(d.c().Start("nope"), absl::StatusCode::kNotFound, "nope");
  code_and_message(d.c().Wait("nope").status(), absl::StatusCode::kNotFound, "nope");
  code_and_message(d.c().Signal("nope", 15), absl::StatusCode::kNotFound, "nope");
  code_and_message(d.c().Destroy("nope").status(), absl::StatusCode::kNotFound, "nope");

  req = Spec({"/bin/true"});
  req.set_id("twice");
  ASSERT_TRUE(d.c().Create(req).ok());
  code_and_message(d.c().Create(req).status(), absl::StatusCode::kAlreadyExists, "twice");
  code_and_message(d.c().Signal("twice", 0), absl::StatusCode::kInvalidArgument, "signal");
  code_and_message(d.c().Signal("twice", 15), absl::StatusCode::kFailedPrecondition,
                   "is created, not running");
  ASSERT_TRUE(d.c().Start("twice").ok());
  code_and_message(d.c().Start("twice"), absl::StatusCode::kFailedPrecondition, "twice");
  ASSERT_TRUE(d.c().Wait("twice").ok());
  ASSERT_TRUE(d.c().Destroy("twice").ok());
  code_and_message(d.c().Destroy("twice").status(), absl::StatusCode::kNotFound, "twice");

  v1::CheckpointRequest cp;
  cp.set_id("x");
  cp.set_image_dir("/nonexistent-dir/img");
  code_and_message(d.c().Checkpoint(cp).status(), absl::StatusCode::kNotFound, "x");
  v1::RestoreRequest rr;
  rr.set_image_dir("relative/img");
  code_and_message(d.c().Restore(rr).status(), absl::StatusCode::kInvalidArgument,
                   "image_dir");
  rr.set_image_dir("/nonexistent-image-dir");
  code_and_message(d.c().Restore(rr).status(), absl::StatusCode::kNotFound,
                   "/nonexistent-image-dir");
}

TEST(SandboxdTest, MaxSandboxesIsResourceExhausted) {
  SKIP_WITHOUT_BINARIES();
  Daemon d({"--max-sandboxes=2", "--pool-size=0"});
  ASSERT_TRUE(d.c().Create(Spec({"/bin/true"})).ok());
  ASSERT_TRUE(d.c().Create(Spec({"/bin/true"})).ok());
  absl::Status s = d.c().Create(Spec({"/bin/true"})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--max-sandboxes=2")) << s;
}

// A program the rootfs does not have is refused at create, naming the
// field; one under what the Sentry mounts itself (/proc) is judged at the
// start, which fails the sandbox.
TEST(SandboxdTest, MissingProgramIsRefusedAtCreate) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::Status s = d.c().Create(Spec({"/nonexistent/program"})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "spec.process.argv[0]")) << s;
  absl::StatusOr<std::vector<v1::SandboxInfo>> list = d.c().List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST(SandboxdTest, MissingProgramFailsTheSandbox) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/proc/nonexistent/program"}));
  ASSERT_TRUE(created.ok()) << created.status();
  RunResult r = Attach(d.c(), created->id());
  EXPECT_FALSE(r.status.ok());
  EXPECT_TRUE(absl::StrContains(r.status.message(), "start")) << r.status;
  absl::StatusOr<v1::SandboxInfo> info = d.c().Get(created->id());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), v1::SANDBOX_STATE_FAILED);
  EXPECT_FALSE(info->exit().error().empty());
}

// ExecRequest.Start.remove (`sandboxctl run --rm`): the daemon destroys
// the sandbox itself once the attach ends, and says so with the exit.
TEST(SandboxdTest, AttachWithRemoveDestroysTheSandbox) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created =
      d.c().Create(Spec({"/bin/sh", "-c", "echo hi; exit 4"}));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_FALSE(created->info().sentry_pids().empty());
  const pid_t sentry = created->info().sentry_pids(0);
  std::string out;
  ExecTrace trace;
  ExecIo io;
  io.on_stdout = [&](absl::string_view s) { out.append(s.data(), s.size()); };
  io.remove = true;
  io.trace = &trace;
  absl::StatusOr<v1::ExitStatus> e = d.c().Exec(created->id(), true, {}, io);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->code(), 4);
  EXPECT_EQ(out, "hi\n");
  EXPECT_TRUE(trace.removed);
  // Gone from the table before the client heard of the exit.
  absl::StatusOr<std::vector<v1::SandboxInfo>> list = d.c().List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  EXPECT_EQ(d.c().Get(created->id()).status().code(), absl::StatusCode::kNotFound);
  // The timings came with the exit, the attach's own steps included.
  ASSERT_TRUE(trace.has_timings);
  std::set<std::string> stages;
  for (const v1::Stage& st : trace.timings.stages()) stages.insert(st.name());
  for (const char* want : {"create.validate", "start.sentry_call", "attach.first_message",
                           "attach.pid_sent", "exit.status_after_output_end"}) {
    EXPECT_TRUE(stages.count(want)) << want;
  }
  std::vector<std::string> steps;
  for (const auto& [name, d] : trace.steps) steps.push_back(name);
  EXPECT_EQ(steps, (std::vector<std::string>{"client.exec.open", "client.exec.pid",
                                             "client.exec.exit", "client.exec.finish"}));
  // The Sentry is killed and reaped off the client's path, soon after.
  bool gone = false;
  for (int i = 0; i < 500 && !gone; i++) {
    gone = kill(sentry, 0) != 0 && errno == ESRCH;
    if (!gone) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(gone) << "sentry " << sentry << " still there";
}

TEST(SandboxdTest, AttachWithRemoveOfAMissingProgram) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/proc/nonexistent/program"}));
  ASSERT_TRUE(created.ok()) << created.status();
  ExecIo io;
  io.remove = true;
  absl::StatusOr<v1::ExitStatus> e = d.c().Exec(created->id(), true, {}, io);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound) << e.status();
  EXPECT_EQ(d.c().Get(created->id()).status().code(), absl::StatusCode::kNotFound);
}

// ExecRequest.Start.create: Create and attach in one call.
TEST(SandboxdTest, CreateAndAttachInOneCall) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  v1::CreateRequest req = Spec({"/bin/sh", "-c", "echo one call; exit 6"});
  std::string out, id;
  int pid = 0;
  ExecTrace trace;
  ExecIo io;
  io.on_stdout = [&](absl::string_view s) { out.append(s.data(), s.size()); };
  io.create = &req;
  io.on_id = [&](const std::string& new_id) { id = new_id; };
  io.on_pid = [&](int p) { pid = p; };
  io.remove = true;
  io.trace = &trace;
  absl::StatusOr<v1::ExitStatus> e = d.c().Exec("", true, {}, io);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->code(), 6);
  EXPECT_EQ(out, "one call\n");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(pid, 1);
  EXPECT_TRUE(trace.removed);
  EXPECT_EQ(d.c().Get(id).status().code(), absl::StatusCode::kNotFound);
  bool has_create_stage = false;
  for (const v1::Stage& st : trace.timings.stages()) {
    has_create_stage |= st.name() == "create.pool_take" || st.name() == "create.spawn_sentry";
  }
  EXPECT_TRUE(has_create_stage);

  // Create's checks, with Create's messages.
  req.mutable_spec()->set_rootfs("relative");
  ExecIo bad;
  bad.create = &req;
  e = d.c().Exec("", true, {}, bad);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
  EXPECT_TRUE(absl::StrContains(e.status().message(), "spec.rootfs")) << e.status();
  absl::StatusOr<std::vector<v1::SandboxInfo>> list = d.c().List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

// A refused attach removes nothing: the sandbox is someone else's.
TEST(SandboxdTest, RefusedAttachWithRemoveLeavesTheSandbox) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/bin/sleep", "600"}));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(d.c().Start(created->id()).ok());
  ExecIo io;
  io.remove = true;
  absl::StatusOr<v1::ExitStatus> e = d.c().Exec(created->id(), true, {}, io);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
  absl::StatusOr<v1::SandboxInfo> info = d.c().Get(created->id());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), v1::SANDBOX_STATE_RUNNING);
  ASSERT_TRUE(d.c().Destroy(created->id()).ok());
}

// SignalRequest.pid: one Exec'd process, not the init.
TEST(SandboxdTest, SignalOneExecdProcess) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/bin/sleep", "600"}));
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string id = created->id();
  ASSERT_TRUE(d.c().Start(id).ok());
  v1::ProcessSpec p;
  p.add_argv("/bin/sleep");
  p.add_argv("600");
  std::atomic<int> pid{0};
  ExecIo io;
  io.on_pid = [&](int n) { pid = n; };
  absl::StatusOr<v1::ExitStatus> e;
  std::thread exec([&] { e = d.c().Exec(id, false, p, io); });
  for (int i = 0; i < 1000 && pid == 0; i++) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GT(pid.load(), 1);
  EXPECT_EQ(d.c().Signal(id, SIGTERM, /*all=*/true, pid).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.c().Signal(id, SIGTERM, false, 4242).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(d.c().Signal(id, SIGTERM, false, pid).ok());
  exec.join();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->signal(), SIGTERM);
  // The init is untouched.
  absl::StatusOr<v1::SandboxInfo> info = d.c().Get(id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), v1::SANDBOX_STATE_RUNNING);
  ASSERT_TRUE(d.c().Destroy(id).ok());
}

TEST(SandboxdTest, DetachedSandboxKeepsItsLogs) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  v1::CreateRequest req = Spec({"/bin/sh", "-c", "echo out; echo err >&2; exit 7"});
  (*req.mutable_spec()->mutable_labels())["team"] = "a";
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(req);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->info().state(), v1::SANDBOX_STATE_CREATED);
  ASSERT_TRUE(d.c().Start(created->id()).ok());
  absl::StatusOr<v1::ExitStatus> e = d.c().Wait(created->id(), absl::Seconds(60));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->code(), 7);
  std::string out, err;
  // The output may still be draining right after the exit.
  absl::Status s = d.c().Logs(created->id(), /*follow=*/true, [&](const v1::LogsResponse& m) {
    if (m.msg_case() == v1::LogsResponse::kStdout) out += m.stdout();
    if (m.msg_case() == v1::LogsResponse::kStderr) err += m.stderr();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, "out\n");
  EXPECT_EQ(err, "err\n");

  absl::StatusOr<std::vector<v1::SandboxInfo>> list = d.c().List({{"team", "a"}});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].state(), v1::SANDBOX_STATE_STOPPED);
  EXPECT_EQ((*list)[0].exit().code(), 7);
  list = d.c().List({{"team", "b"}});
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST(SandboxdTest, ExecSignalAndWait) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/bin/sleep", "600"}));
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string id = created->id();
  ASSERT_TRUE(d.c().Start(id).ok());

  absl::StatusOr<v1::SandboxInfo> info = d.c().Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), v1::SANDBOX_STATE_RUNNING);
  EXPECT_FALSE(info->sentry_pids().empty());
  EXPECT_TRUE(info->timings().has_started());

  v1::ProcessSpec p;
  p.add_argv("/bin/sh");
  p.add_argv("-c");
  p.add_argv("read x; echo got $x; exit 5");
  p.add_env("PATH=/usr/bin:/bin");
  std::string out;
  ExecIo io;
  io.stdin_data = "value\n";
  io.on_stdout = [&](absl::string_view s) { out.append(s.data(), s.size()); };
  int pid = 0;
  io.on_pid = [&](int p) { pid = p; };
  absl::StatusOr<v1::ExitStatus> e = d.c().Exec(id, false, p, io);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(out, "got value\n");
  EXPECT_EQ(e->code(), 5);
  EXPECT_GT(pid, 1);

  EXPECT_EQ(d.c().Wait(id, absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(d.c().Signal(id, SIGTERM).ok());
  e = d.c().Wait(id, absl::Seconds(60));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->signal(), SIGTERM);
  ASSERT_TRUE(d.c().Destroy(id).ok());
}

TEST(SandboxdTest, TtyGetsTheSizeAndMergesOutput) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/bin/sleep", "600"}));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(d.c().Start(created->id()).ok());
  v1::ProcessSpec p;
  p.add_argv("/bin/sh");
  p.add_argv("-c");
  p.add_argv("stty size; test -t 0 && echo tty; echo err >&2");
  p.add_env("PATH=/usr/bin:/bin");
  p.set_tty(true);
  std::string out, err;
  ExecIo io;
  io.get_size = [](uint32_t* rows, uint32_t* cols) {
    *rows = 33;
    *cols = 111;
    return true;
  };
  io.on_stdout = [&](absl::string_view s) { out.append(s.data(), s.size()); };
  io.on_stderr = [&](absl::string_view s) { err.append(s.data(), s.size()); };
  absl::StatusOr<v1::ExitStatus> e = d.c().Exec(created->id(), false, p, io);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->code(), 0);
  EXPECT_TRUE(absl::StrContains(out, "33 111")) << out;
  EXPECT_TRUE(absl::StrContains(out, "tty")) << out;
  EXPECT_TRUE(absl::StrContains(out, "err")) << out;  // stderr is the terminal too
  EXPECT_EQ(err, "");
}

// The directory of `pid`'s cgroup in the v1 hierarchy of `controller`
// ("" when there is none: v2 or no such hierarchy).
std::string V1CgroupDir(int pid, const std::string& controller) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/cgroup"));
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
      if (c == controller) {
        std::string dir = absl::StrCat("/sys/fs/cgroup/", parts[1], parts[2]);
        if (access(dir.c_str(), F_OK) == 0) return dir;
        return absl::StrCat("/sys/fs/cgroup/", controller, parts[2]);
      }
    }
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

TEST(SandboxdTest, LimitsAreTheSentrysCgroup) {
  SKIP_WITHOUT_BINARIES();
  Daemon d({"--pool-size=1"});
  v1::CreateRequest req = Spec({"/bin/sleep", "600"});
  req.mutable_spec()->mutable_limits()->set_memory_bytes(256 << 20);
  req.mutable_spec()->mutable_limits()->set_pids(300);
  absl::StatusOr<v1::CreateResponse> created = d.c().Create(req);
  if (absl::IsFailedPrecondition(created.status())) {
    GTEST_SKIP() << "no cgroups here: " << created.status();
  }
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(d.c().Start(created->id()).ok());
  absl::StatusOr<v1::SandboxInfo> info = d.c().Get(created->id());
  ASSERT_TRUE(info.ok());
  const int sentry = info->sentry_pids(0);
  const std::string mem = V1CgroupDir(sentry, "memory");
  const std::string pids = V1CgroupDir(sentry, "pids");
  if (mem.empty() || pids.empty()) GTEST_SKIP() << "not a cgroup v1 host";
  EXPECT_TRUE(absl::StrContains(mem, d.cgroup_parent())) << mem;
  EXPECT_EQ(ReadFile(mem + "/memory.limit_in_bytes"), std::to_string(256 << 20));
  // The sandbox's 300 tasks and room for the Sentry's own host tasks
  // (daemon/cgroup.h, HostPidsFor: 4 each, plus 64).
  EXPECT_EQ(ReadFile(pids + "/pids.max"), "1264");
  // The Sentry and everything it forked (its stubs) are in there.
  std::vector<std::string> procs = absl::StrSplit(ReadFile(pids + "/cgroup.procs"), '\n');
  EXPECT_GE(procs.size(), 2u) << ReadFile(pids + "/cgroup.procs");
  EXPECT_NE(std::find(procs.begin(), procs.end(), std::to_string(sentry)), procs.end());
  EXPECT_GT(info->usage().memory_bytes(), 0u);
  ASSERT_TRUE(d.c().Destroy(created->id()).ok());
  // Gone with the sandbox.
  for (int i = 0; i < 100 && access(mem.c_str(), F_OK) == 0; i++) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_NE(access(mem.c_str(), F_OK), 0) << mem << " outlived its sandbox";
}

// Counts what a daemon holds: open fds, child processes, cgroup dirs, RSS.
struct Footprint {
  int fds = 0;
  int children = 0;
  int cgroups = 0;
  long rss_kb = 0;
};

int CountDir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') n++;
  }
  closedir(d);
  return n;
}

int CountSubdirs(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') n++;
  }
  closedir(d);
  return n;
}

Footprint Measure(const Daemon& d) {
  Footprint f;
  f.fds = CountDir(absl::StrCat("/proc/", d.pid(), "/fd"));
  DIR* proc = opendir("/proc");
  while (dirent* e = readdir(proc)) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream st(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(st, line);
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
    if (fields.size() > 1 && fields[1] == std::to_string(d.pid())) f.children++;
  }
  closedir(proc);
  // Under either layout, the pids hierarchy (v1) or the unified one (v2)
  // holds one directory per Sentry.
  for (const char* root : {"/sys/fs/cgroup/pids/", "/sys/fs/cgroup/memory/", "/sys/fs/cgroup/"}) {
    const std::string p = root + d.cgroup_parent();
    if (access(p.c_str(), F_OK) == 0) {
      f.cgroups = CountSubdirs(p);
      break;
    }
  }
  std::ifstream status(absl::StrCat("/proc/", d.pid(), "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() > 1) (void)absl::SimpleAtoi(parts[1], &f.rss_kb);
    }
  }
  return f;
}

TEST(SandboxdTest, CyclesLeaveNothingBehind) {
  SKIP_WITHOUT_BINARIES();
  Daemon d({"--pool-size=1"});
  auto cycle = [&](int i) {
    absl::StatusOr<v1::CreateResponse> created = d.c().Create(Spec({"/bin/sleep", "600"}));
    ASSERT_TRUE(created.ok()) << created.status();
    ASSERT_TRUE(d.c().Start(created->id()).ok());
    v1::ProcessSpec p;
    p.add_argv("/bin/echo");
    p.add_argv(absl::StrCat("cycle ", i));
    std::string out;
    ExecIo io;
    io.on_stdout = [&](absl::string_view s) { out.append(s.data(), s.size()); };
    absl::StatusOr<v1::ExitStatus> e = d.c().Exec(created->id(), false, p, io);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(out, absl::StrCat("cycle ", i, "\n"));
    ASSERT_TRUE(d.c().Destroy(created->id()).ok());
  };
  // Warm up (gRPC's threads and buffers), then settle: the pool is full.
  for (int i = 0; i < 10; i++) cycle(i);
  // The refill's Sentry counts as a child before it is done (its Persist
  // socket is open until the Sentry has it): settled is one child and the
  // same descriptors twice in a row.
  auto settled = [&] {
    Footprint f, last;
    for (int i = 0; i < 100; i++) {
      f = Measure(d);
      if (f.children == 1 && i > 0 && f.fds == last.fds) break;
      last = f;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return f;
  };
  Footprint before = settled();
  const int kCycles = 200;
  for (int i = 0; i < kCycles; i++) {
    cycle(i);
    if (HasFatalFailure()) return;
  }
  Footprint after = settled();
  EXPECT_EQ(after.children, 1) << "child processes besides the pooled sentry";
  EXPECT_EQ(after.fds, before.fds) << "open fds";
  EXPECT_EQ(after.cgroups, before.cgroups) << "cgroup dirs";
  EXPECT_LT(after.rss_kb - before.rss_kb, 16 * 1024) << "RSS grew (KiB) " << before.rss_kb
                                                     << " -> " << after.rss_kb;
}

std::string HttpGet(const std::string& hostport, const std::string& path) {
  std::vector<std::string> hp = absl::StrSplit(hostport, ':');
  if (hp.size() != 2) return "";
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  int port = 0;
  (void)absl::SimpleAtoi(hp[1], &port);
  a.sin_port = htons(port);
  inet_pton(AF_INET, hp[0].c_str(), &a.sin_addr);
  std::string resp;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: x\r\n\r\n");
    (void)!write(fd, req.data(), req.size());
    char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
  }
  close(fd);
  return resp;
}

TEST(SandboxdTest, SentryCrashFailsOnlyItsSandbox) {
  SKIP_WITHOUT_BINARIES();
  Daemon d;
  absl::StatusOr<v1::CreateResponse> a = d.c().Create(Spec({"/bin/sleep", "600"}));
  absl::StatusOr<v1::CreateResponse> b = d.c().Create(Spec({"/bin/sleep", "600"}));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(d.c().Start(a->id()).ok());
  ASSERT_TRUE(d.c().Start(b->id()).ok());
  absl::StatusOr<v1::SandboxInfo> info = d.c().Get(a->id());
  ASSERT_TRUE(info.ok());
  ASSERT_FALSE(info->sentry_pids().empty());
  ASSERT_EQ(kill(info->sentry_pids(0), SIGKILL), 0);

  absl::StatusOr<v1::ExitStatus> e = d.c().Wait(a->id(), absl::Seconds(30));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(absl::StrContains(e->error(), "killed by signal 9")) << e->error();
  info = d.c().Get(a->id());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), v1::SANDBOX_STATE_FAILED);

  // The other sandbox and the daemon go on.
  info = d.c().Get(b->id());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), v1::SANDBOX_STATE_RUNNING);
  RunResult r = RunProgram(d.c(), {"/bin/echo", "still here"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.out, "still here\n");

  std::string metrics = HttpGet(d.MetricsAddress(), "/metrics");
  EXPECT_TRUE(absl::StrContains(metrics, "sandboxd_sentry_crashes_total 1")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "sandboxd_create_seconds_count")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "sandboxd_sandboxes{state=\"failed\"} 1")) << metrics;
}

bool ProcessIsZombie(int pid) {
  std::ifstream st(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(st, line);
  size_t close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';
}

TEST(SandboxdTest, RestartReadoptsWhatTheLastDaemonLeft) {
  SKIP_WITHOUT_BINARIES();
  char tmpl[] = "/tmp/sandboxd_test.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<int> sentries;
  {
    const std::string cgroup = absl::StrCat("--cgroup-parent=sandboxd-test-restart-", getpid());
    Daemon d({"--pool-size=1", cgroup}, dir);
    absl::StatusOr<v1::CreateResponse> a = d.c().Create(Spec({"/bin/sleep", "600"}));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(d.c().Start(a->id()).ok());
    absl::StatusOr<v1::SandboxInfo> info = d.c().Get(a->id());
    ASSERT_TRUE(info.ok());
    sentries.assign(info->sentry_pids().begin(), info->sentry_pids().end());
    d.KillHard();  // leaves the socket, the Sentries and the state dir behind
    absl::SleepFor(absl::Milliseconds(500));
    ASSERT_TRUE(kill(sentries[0], 0) == 0 && !ProcessIsZombie(sentries[0]))
        << "the sentry died with the daemon";
    Daemon again({"--pool-size=1", cgroup}, dir);
    info = again.c().Get(a->id());
    ASSERT_TRUE(info.ok()) << info.status() << again.Log();
    EXPECT_EQ(info->state(), v1::SANDBOX_STATE_RUNNING) << again.Log();
    RunResult r = RunProgram(again.c(), {"/bin/echo", "after restart"});
    ASSERT_TRUE(r.status.ok()) << r.status << again.Log();
    EXPECT_EQ(r.out, "after restart\n");
    // Destroying the re-adopted sandbox ends its Sentry.
    ASSERT_TRUE(again.c().Destroy(a->id()).ok());
    bool gone = false;
    for (int i = 0; i < 100 && !gone; i++) {
      gone = kill(sentries[0], 0) != 0 || ProcessIsZombie(sentries[0]);
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_TRUE(gone) << "sentry " << sentries[0] << " outlived its Destroy";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace client
}  // namespace sandboxd
