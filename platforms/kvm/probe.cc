#include "platforms/kvm/probe.h"

#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "platforms/kvm/guest_hw.h"
#include "platforms/kvm/guest_pvm.h"
#include "platforms/kvm/stub_pvm.h"

namespace sandboxd::kvm {
namespace {

static_assert(kKickSignal == SIGUSR2);

// The probe's application: one page of code and one of stack.
constexpr uint64_t kProbeCodeVa = 0x400000;
constexpr uint64_t kProbeStackVa = 0x800000;
constexpr uint64_t kPrivateSlotBytes = 4ull << 20;

// loop: syscall          0f 05
//       mov %rax,%rdi    48 89 c7
//       jmp loop         eb f9
// Each syscall shows the host the previous result (in %rdi): the proof
// that a value written by the host reached user mode and survived.
constexpr uint8_t kProbeCode[] = {0x0f, 0x05, 0x48, 0x89, 0xc7, 0xeb, 0xf9};
constexpr uint64_t kSyscallLen = 2;

void NoOp(int) {}

// Stops a KVM_RUN that outlives the timeout: immediate_exit for a thread
// about to enter, a signal for one inside.
class Watchdog {
 public:
  Watchdog(kvm_run* run, absl::Duration timeout)
      : run_(run), target_(pthread_self()) {
    absl::StatusOr<std::thread> th =
        StartThread("the kvm probe's watchdog", [this, timeout] {
          if (done_.WaitForNotificationWithTimeout(timeout)) return;
          fired_.store(true);
          while (!done_.HasBeenNotified()) {
            run_->immediate_exit = 1;
            pthread_kill(target_, kKickSignal);
            done_.WaitForNotificationWithTimeout(absl::Milliseconds(10));
          }
        });
    if (th.ok()) {
      thread_ = std::move(*th);
    } else {
      started_ = th.status();
    }
  }
  ~Watchdog() {
    done_.Notify();
    if (thread_.joinable()) thread_.join();
    run_->immediate_exit = 0;
  }
  bool fired() const { return fired_.load(); }
  // Not OK when the host refused its thread: nothing would stop a guest
  // that never exits, so the probe must not run.
  const absl::Status& started() const { return started_; }

 private:
  kvm_run* const run_;
  const pthread_t target_;
  absl::Notification done_;
  std::atomic<bool> fired_{false};
  absl::Status started_;
  std::thread thread_;
};

// The probe's guest memory: a private slot, its page tables, the program
// (`app`, at most a page) at kProbeCodeVa and a stack page at
// kProbeStackVa. The flavour's stub: `first` runs on the fresh slot (the
// hardware stub's region must be its first pages), `map_stub` once the
// page tables exist, before the program's pages.
struct ProbeMemory {
  std::unique_ptr<PrivateMemory> mem;
  std::unique_ptr<PageTables> pt;
};
absl::StatusOr<ProbeMemory> MakeProbeMemory(
    Vm* vm, ProbeReport* report, const uint8_t* app, size_t app_len,
    const std::function<absl::Status(PrivateMemory*)>& first,
    const std::function<absl::Status(PrivateMemory*, PageTables*)>& map_stub) {
  if (app_len > k4K) {
    return absl::InvalidArgumentError("kvm probe: code larger than a page");
  }
  ProbeMemory m;
  ASSIGN_OR_RETURN(m.mem,
                   PrivateMemory::Create(vm, /*slot=*/1, kPrivateSlotBytes));
  report->private_slot_bytes = kPrivateSlotBytes;
  RETURN_IF_ERROR(first(m.mem.get()));
  ASSIGN_OR_RETURN(PageTables pt, PageTables::Create(m.mem.get()));
  m.pt = std::make_unique<PageTables>(std::move(pt));
  RETURN_IF_ERROR(map_stub(m.mem.get(), m.pt.get()));
  ASSIGN_OR_RETURN(TablePage code, m.mem->AllocPage());
  std::memcpy(code.host, app, app_len);
  ASSIGN_OR_RETURN(TablePage stack, m.mem->AllocPage());
  RETURN_IF_ERROR(m.pt->Map(kProbeCodeVa, code.phys, k4K,
                            PteAccess{.write = false, .exec = true}));
  RETURN_IF_ERROR(m.pt->Map(kProbeStackVa, stack.phys, k4K,
                            PteAccess{.write = true, .exec = false}));
  return m;
}

// Creates vCPU 0 (timed as the VM's first vCPU), lets the flavour set it
// up (`init`: its MSRs and segments) and points it at the program.
absl::StatusOr<std::unique_ptr<Vcpu>> MakeProbeVcpu(
    Vm* vm, const std::function<absl::Status(Vcpu&)>& init) {
  const uint64_t t0 = MonotonicNs();
  ASSIGN_OR_RETURN(std::unique_ptr<Vcpu> vcpu, vm->CreateVcpu(0));
  vm->mutable_timings().first_vcpu_ns = MonotonicNs() - t0;
  RETURN_IF_ERROR(init(*vcpu));
  kvm_regs r = {};
  r.rip = kProbeCodeVa;
  r.rsp = kProbeStackVa + k4K;
  r.rflags = 0x202;
  RETURN_IF_ERROR(vcpu->SetRegs(r));
  return vcpu;
}

// The flavour's side of one round trip. `is_syscall`: whether this exit
// is the program's syscall (else *what may say why, beyond the exit's
// description); `resume`: sets up the return to user mode (rax is set).
struct RoundTripFlavour {
  const char* name;
  std::function<bool(uint32_t reason, const kvm_run& run, std::string* what)>
      is_syscall;
  std::function<void(kvm_regs& q)> resume;
};

// Runs `round_trips` syscalls of the probe program on `vcpu`, each
// KVM_RUN timed; each must come back as the program's syscall, from the
// right place and with the result of the one before in rdi. Fails after
// `timeout` without an exit.
absl::Status RunRoundTrips(Vcpu& vcpu, const RoundTripFlavour& flavour,
                           int round_trips, absl::Duration timeout,
                           ProbeReport* report) {
  kvm_run* run = vcpu.run();
  run->kvm_valid_regs = KVM_SYNC_X86_REGS;
  InstallKickHandler();
  Watchdog watchdog(run, timeout);
  RETURN_IF_ERROR(watchdog.started());
  std::vector<uint64_t> times;
  times.reserve(round_trips);
  uint64_t want_rdi = 0;
  for (int i = 0; i < round_trips; ++i) {
    const uint64_t start = MonotonicNs();
    ASSIGN_OR_RETURN(uint32_t reason, vcpu.Run());
    const uint64_t took = MonotonicNs() - start;
    if (reason == KVM_EXIT_INTR && watchdog.fired()) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "kvm probe (%s): no exit within %s after %d round trips; %s",
          flavour.name, absl::FormatDuration(timeout), i,
          DescribeExit(vcpu, reason)));
    }
    kvm_regs& q = run->s.regs.regs;
    std::string what = DescribeExit(vcpu, reason);
    if (!flavour.is_syscall(reason, *run, &what) ||
        q.rcx != kProbeCodeVa + kSyscallLen || (i > 0 && q.rdi != want_rdi)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "kvm probe (%s): round trip %d did not come back as the syscall "
          "(want rcx=%#x rdi=%#x): %s",
          flavour.name, i, kProbeCodeVa + kSyscallLen, want_rdi, what));
    }
    if (i == 0) {
      report->first_entry_ns = took;
    } else {
      times.push_back(took);
    }
    want_rdi = 0x5eed0000 + i;
    q.rax = want_rdi;
    flavour.resume(q);
    run->kvm_dirty_regs = KVM_SYNC_X86_REGS;
    report->round_trips = i + 1;
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    report->round_trip_median_ns = times[times.size() / 2];
    report->round_trip_min_ns = times.front();
  }
  return absl::OkStatus();
}

absl::Status ProbePvm(Vm* vm, ProbeReport* report, const uint8_t* app,
                      size_t app_len, int round_trips, absl::Duration timeout) {
  ASSIGN_OR_RETURN(ProbeMemory m,
                   MakeProbeMemory(
                       vm, report, app, app_len,
                       [](PrivateMemory*) { return absl::OkStatus(); },
                       [](PrivateMemory* mem, PageTables* pt) {
                         return InstallPvmStub(mem, pt);
                       }));
  ASSIGN_OR_RETURN(std::unique_ptr<Vcpu> vcpu,
                   MakeProbeVcpu(vm, [&](Vcpu& v) -> absl::Status {
                     RETURN_IF_ERROR(InitPvmVcpu(v));
                     kvm_sregs s;
                     RETURN_IF_ERROR(v.GetSregs(&s));
                     UserModeSregs(&s, m.pt->root(), 0, 0);
                     return v.SetSregs(s);
                   }));
  RoundTripFlavour pvm;
  pvm.name = "pvm";
  pvm.is_syscall = [](uint32_t reason, const kvm_run& run, std::string*) {
    return reason == KVM_EXIT_IO && run.io.direction == KVM_EXIT_IO_OUT &&
           run.io.port == kSyscallPort;
  };
  // Return to user mode as SYSRET would.
  pvm.resume = [](kvm_regs& q) {
    q.rip = q.rcx;
    q.rflags = q.r11;
  };
  return RunRoundTrips(*vcpu, pvm, round_trips, timeout, report);
}

// The same round trips through the hardware flavour's stub (guest_hw.h):
// SYSCALL to the stub in ring 0, its OUT, and back through its SYSRETQ.
absl::Status ProbeHardware(Vm* vm, ProbeReport* report, const uint8_t* app,
                           size_t app_len, int round_trips,
                           absl::Duration timeout) {
  uint64_t stub_phys = 0;
  ASSIGN_OR_RETURN(
      ProbeMemory m,
      MakeProbeMemory(
          vm, report, app, app_len,
          [&](PrivateMemory* mem) -> absl::Status {
            ASSIGN_OR_RETURN(stub_phys, hw::AllocStubRegion(mem, 1));
            return absl::OkStatus();
          },
          [&](PrivateMemory*, PageTables* pt) {
            return hw::MapStubRegion(pt, stub_phys, 1);
          }));
  ASSIGN_OR_RETURN(std::unique_ptr<Vcpu> vcpu,
                   MakeProbeVcpu(vm, [&](Vcpu& v) -> absl::Status {
                     RETURN_IF_ERROR(hw::InitVcpu(v));
                     kvm_sregs s;
                     RETURN_IF_ERROR(v.GetSregs(&s));
                     hw::UserSregs(&s, 0, m.pt->root(), 0, 0);
                     return v.SetSregs(s);
                   }));
  const uint64_t* frame = reinterpret_cast<const uint64_t*>(
      reinterpret_cast<uint8_t*>(m.mem->HostOf(stub_phys)) +
      (hw::StackTopVa(0) - kStubVa)) - hw::kFrameWords;
  RoundTripFlavour hardware;
  hardware.name = "hardware";
  hardware.is_syscall = [frame](uint32_t, const kvm_run& run,
                                std::string* what) {
    const hw::Exit e = hw::DecodeExit(run, run.s.regs.regs.rip, frame);
    if (e.kind == hw::Exit::Kind::kException) {
      absl::StrAppendFormat(what, "; exception %d error %#x at rip=%#x cs=%#x",
                            e.vector, e.error_code, e.rip, e.cs);
    }
    return e.kind == hw::Exit::Kind::kSyscall;
  };
  // The stub's SYSRETQ returns with RAX; RIP stays in the stub.
  hardware.resume = [](kvm_regs&) {};
  return RunRoundTrips(*vcpu, hardware, round_trips, timeout, report);
}

}  // namespace

void InstallKickHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_handler = NoOp;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: KVM_RUN returns EINTR
    sigaction(kKickSignal, &sa, nullptr);
  });
}

absl::StatusOr<ProbeReport> RunProbe(int round_trips, absl::Duration timeout) {
  return RunProbeWithCode(kProbeCode, sizeof(kProbeCode), round_trips,
                          timeout);
}

absl::StatusOr<ProbeReport> RunProbeWithCode(const uint8_t* code,
                                             size_t code_len, int round_trips,
                                             absl::Duration timeout) {
  ProbeReport report;
  {
    ASSIGN_OR_RETURN(UniqueFd kvm, OpenKvm());
    report.flavour = DetectFlavour(kvm.get());
  }
  if (report.flavour.flavour == Flavour::kNone) {
    return absl::UnavailableError(
        absl::StrCat("kvm: no usable flavour: ", report.flavour.reason));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Vm> vm, Vm::Create(report.flavour.flavour));
  if (report.flavour.flavour == Flavour::kHardware) {
    RETURN_IF_ERROR(ProbeHardware(vm.get(), &report, code, code_len,
                                  round_trips, timeout));
  } else {
    RETURN_IF_ERROR(
        ProbePvm(vm.get(), &report, code, code_len, round_trips, timeout));
  }
  report.timings = vm->timings();
  return report;
}

}  // namespace sandboxd::kvm
