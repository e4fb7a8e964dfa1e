#include "platforms/systrap/systrap.h"

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "platforms/systrap/seccomp_filter.h"
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/template_signal_safe.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::systrap {
namespace {

using platform::CpuState;
using platform::Event;

long Futex(uint32_t* addr, int op, uint32_t val) {
  return syscall(SYS_futex, addr, op, val, nullptr, nullptr, 0);
}

uint32_t LoadAcquire(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
uint32_t LoadSeqCst(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
void StoreSeqCst(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

// TSC cycles per microsecond, measured against CLOCK_MONOTONIC over 250 us
// (two clock reads of well under 1 us each: better than 1 %, plenty for a
// spin window and log2 latency buckets).
uint64_t TscPerMicrosecond() {
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  uint64_t c0 = __rdtsc();
  do {
    clock_gettime(CLOCK_MONOTONIC, &b);
  } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) <
           250000);
  uint64_t c1 = __rdtsc();
  uint64_t ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
  uint64_t per_us = (c1 - c0) * 1000 / ns;
  return per_us > 0 ? per_us : 1000;
}

// How long a waiter spins, when the fast path says it should, before it
// sleeps on the futex. A syscall served by the Sentry takes a few
// microseconds; a cross-core futex wakeup costs 40-95 us here (LIMITS.md),
// so a spin of this order pays whenever the other side answers within it.
// Whether it pays is measured (fastpath.h).
constexpr uint64_t kSpinMicros = 20;

// A latency above this is no hand-over's: a timestamp was overwritten by
// the application (the slot is in its address space) or is from another
// round trip. Dropped, not counted.
constexpr uint64_t kMaxLatencyNs = 1000ull * 1000 * 1000;

// The TSC and this thread's host CPU (Linux keeps node << 12 | cpu in
// TSC_AUX).
uint64_t RdtscpCpu(int* cpu) {
  unsigned int aux;
  uint64_t t = __rdtscp(&aux);
  *cpu = static_cast<int>(aux & 0xfff);
  return t;
}

// mcontext gregs indices (sys/ucontext.h REG_*).
enum {
  kR8, kR9, kR10, kR11, kR12, kR13, kR14, kR15, kRdi, kRsi, kRbp, kRbx,
  kRdx, kRax, kRcx, kRsp, kRip, kEfl, kCsgsfs, kErr, kTrapno, kOldmask, kCr2
};

// The address of slot i in the stub process.
uint64_t SlotInStub(int i) {
  return kStubShared + offsetof(StubShared, slots) +
         static_cast<uint64_t>(i) * sizeof(ThreadSlot);
}

// The address of worker i's record in the stub process.
uint64_t WorkerInStub(uint32_t i) {
  return kStubShared + offsetof(StubShared, workers) +
         static_cast<uint64_t>(i) * sizeof(StubWorker);
}

// Whether a GS base read in the stub is a worker record (the patched
// path's): the kernel's view of it is 0.
bool IsWorkerRecord(uint64_t gs) {
  if (gs < WorkerInStub(1) || gs > WorkerInStub(kMaxThreads - 1)) return false;
  return (gs - WorkerInStub(0)) % sizeof(StubWorker) == 0;
}

void RegsToGregs(const platform::Regs& r, uint64_t* g) {
  g[kR8] = r.r8; g[kR9] = r.r9; g[kR10] = r.r10; g[kR11] = r.r11;
  g[kR12] = r.r12; g[kR13] = r.r13; g[kR14] = r.r14; g[kR15] = r.r15;
  g[kRdi] = r.rdi; g[kRsi] = r.rsi; g[kRbp] = r.rbp; g[kRbx] = r.rbx;
  g[kRdx] = r.rdx; g[kRax] = r.rax; g[kRcx] = r.rcx; g[kRsp] = r.rsp;
  g[kRip] = r.rip; g[kEfl] = r.eflags;
}

void GregsToRegs(const uint64_t* g, platform::Regs& r) {
  r.r8 = g[kR8]; r.r9 = g[kR9]; r.r10 = g[kR10]; r.r11 = g[kR11];
  r.r12 = g[kR12]; r.r13 = g[kR13]; r.r14 = g[kR14]; r.r15 = g[kR15];
  r.rdi = g[kRdi]; r.rsi = g[kRsi]; r.rbp = g[kRbp]; r.rbx = g[kRbx];
  r.rdx = g[kRdx]; r.rax = g[kRax]; r.rcx = g[kRcx]; r.rsp = g[kRsp];
  r.rip = g[kRip]; r.eflags = g[kEfl];
  r.cs = g[kCsgsfs] & 0xffff;
  r.ss = (g[kCsgsfs] >> 48) & 0xffff;
}

}  // namespace

// ---------------------------------------------------------------------------
// Systrap

absl::Status ReserveStubWindow() {
  static absl::Mutex mu(absl::kConstInit);
  static bool reserved ABSL_GUARDED_BY(mu) = false;
  absl::MutexLock l(&mu);
  if (reserved) return absl::OkStatus();
  void* m = mmap(reinterpret_cast<void*>(kStubBase), kStubWindowEnd - kStubBase,
                 PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                 -1, 0);
  if (m == MAP_FAILED) {
    return ErrnoStatus(absl::StrCat("systrap: reserving the stub window at 0x",
                                    absl::Hex(kStubBase)),
                       errno);
  }
  reserved = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Systrap>> Systrap::Create(
    int memfile_fd, FastPathMode fastpath) {
  std::unique_ptr<Systrap> p(new Systrap());
  // Spinning only pays when the other side runs on another CPU at the
  // same time; confined to one CPU the spinner would only delay it.
  cpu_set_t cpus;
  int ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const uint64_t tsc_per_us = TscPerMicrosecond();
  p->ns_per_cycle_q32_ = (uint64_t{1000} << 32) / tsc_per_us;
  p->spin_cycles_ = ncpu > 1 && fastpath != FastPathMode::kOff
                        ? tsc_per_us * kSpinMicros
                        : 0;
  FastPath::Options fo;
  fo.mode = fastpath;
  fo.cpus = ncpu;
  p->fastpath_ = std::make_unique<FastPath>(fo);
  p->has_fsgsbase_ = (getauxval(AT_HWCAP2) & 2 /* HWCAP2_FSGSBASE */) != 0;

  RETURN_IF_ERROR(ReserveStubWindow());

  p->areas_fd_ = UniqueFd(memfd_create("sandboxd-stub-areas", MFD_CLOEXEC));
  if (!p->areas_fd_.valid()) {
    return ErrnoStatus("systrap: memfd for the stubs' shared areas", errno);
  }
  ASSIGN_OR_RETURN(Area area, p->TakeArea());  // area 0: the template's
  auto* shared = static_cast<StubShared*>(area.map.addr());
  const pid_t sentry_pid = getpid();
  shared->config.has_fsgsbase = p->has_fsgsbase_ ? 1 : 0;
  shared->config.sentry_pid = sentry_pid;
  shared->control.owner = kOwnerSentry;
  static sock_fprog filter_prog;
  const std::vector<sock_filter>& filter = StubFilter();
  filter_prog.len = static_cast<unsigned short>(filter.size());
  filter_prog.filter = const_cast<sock_filter*>(filter.data());

  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("systrap: forking the stub template", errno);
  if (pid == 0) {
    TemplateArgs args;
    args.memfile_fd = memfile_fd;
    args.areas_fd = p->areas_fd_.get();
    args.sentry_pid = sentry_pid;
    args.filter = &filter_prog;
    TemplateMain(args);
  }
  p->template_.reset(new StubProcess(p.get(), pid, area.index,
                                     std::move(area.map)));
  // After the fork: the template must be forked while we have one thread.
  if (fastpath == FastPathMode::kTimer) {
    Systrap* raw = p.get();
    p->timer_ = std::thread([raw] { raw->TimerLoop(); });
  }
  return p;
}

void Systrap::TimerLoop() {
  absl::MutexLock l(&timer_mu_);
  const absl::Duration period = absl::Nanoseconds(FastPath::kTimerPeriodNs);
  while (!timer_mu_.AwaitWithTimeout(absl::Condition(&timer_stop_), period)) {
    fastpath_->Tick(TscToNs(__rdtsc()));
  }
}

const Stats& Systrap::stats() {
  int64_t awake = 0, queued = 0;
  {
    absl::MutexLock l(&live_mu_);
    for (StubProcess* s : live_) s->SampleGauges(&awake, &queued);
  }
  Stats& st = fastpath_->mutable_counters();
  st.stub_threads_awake.store(awake, std::memory_order_relaxed);
  st.contexts_queued.store(queued, std::memory_order_relaxed);
  return st;
}

void Systrap::ExportStats(control::PlatformStats* out) {
  out->set_platform(Name());
  ToProto(stats(), out->mutable_systrap());
}

Systrap::~Systrap() {
  {
    absl::MutexLock l(&timer_mu_);
    timer_stop_ = true;
  }
  if (timer_.joinable()) timer_.join();
  {
    absl::MutexLock l(&pool_mu_);
    stopping_ = true;
  }
  if (refiller_.joinable()) refiller_.join();
  {
    absl::MutexLock l(&pool_mu_);
    pool_.clear();  // kills them
  }
  template_.reset();  // kills it
}

void Systrap::set_pool_size(size_t n) {
  absl::MutexLock l(&pool_mu_);
  pool_size_ = n;
  while (pool_.size() > n) pool_.pop_back();
}

absl::Status Systrap::MakeSpareStub() {
  ASSIGN_OR_RETURN(std::unique_ptr<StubProcess> s, CreateStub());
  RETURN_IF_ERROR(s->StartFirstWorker());
  absl::MutexLock l(&pool_mu_);
  pool_.push_back(std::move(s));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<platform::AddressSpace>>
Systrap::NewAddressSpace() {
  {
    absl::MutexLock l(&pool_mu_);
    address_spaces_made_++;
    if (pool_size_ > 0 && address_spaces_made_ == 2 && !refiller_.joinable()) {
      refiller_ = std::thread([this] { RefillLoop(); });
    }
    // A pooled process that died meanwhile is of no use.
    while (!pool_.empty() && pool_.back()->dead()) pool_.pop_back();
    if (!pool_.empty()) {
      std::unique_ptr<StubProcess> s = std::move(pool_.back());
      pool_.pop_back();
      return std::unique_ptr<platform::AddressSpace>(std::move(s));
    }
  }
  auto s = CreateStub();
  if (!s.ok()) return s.status();
  return std::unique_ptr<platform::AddressSpace>(std::move(*s));
}

void Systrap::RefillLoop() {
  absl::MutexLock l(&pool_mu_);
  for (;;) {
    pool_mu_.Await(absl::Condition(
        +[](Systrap* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->pool_mu_) {
          return p->stopping_ || p->pool_.size() < p->pool_size_;
        },
        this));
    if (stopping_) return;
    pool_mu_.Unlock();
    auto s = CreateStub();
    if (s.ok()) {
      // Off the path of the fork or exec that takes it.
      absl::Status st = (*s)->StartFirstWorker();
      if (!st.ok()) s = st;
    }
    pool_mu_.Lock();
    if (!s.ok()) {
      // The template is gone or the host refuses: the synchronous path
      // will report it; stop making processes.
      fprintf(stderr, "sentry: systrap: stub pool: %s\n",
              s.status().ToString().c_str());
      return;
    }
    if (stopping_) return;  // *s is killed on the way out
    pool_.push_back(std::move(*s));
  }
}

absl::StatusOr<Systrap::Area> Systrap::TakeArea() {
  absl::MutexLock l(&areas_mu_);
  if (!free_areas_.empty()) {
    Area a = std::move(free_areas_.back());
    free_areas_.pop_back();
    return a;
  }
  if (areas_made_ >= kMaxStubAreas) {
    return absl::ResourceExhaustedError(
        absl::StrCat("systrap: all ", kMaxStubAreas,
                     " shared areas are in use (as many stub processes)"));
  }
  const uint32_t index = areas_made_;
  const off_t off = static_cast<off_t>(index) * kStubSharedSize;
  // Sparse: only the pages a stub touches (its header and the slots it
  // hands out) are ever allocated.
  if (ftruncate(areas_fd_.get(), off + kStubSharedSize) != 0) {
    return ErrnoStatus(absl::StrCat("systrap: growing the stubs' shared areas "
                                    "to ", index + 1),
                       errno);
  }
  void* m = mmap(nullptr, kStubSharedSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                 areas_fd_.get(), off);
  if (m == MAP_FAILED) {
    return ErrnoStatus(absl::StrCat("systrap: mapping shared area ", index),
                       errno);
  }
  areas_made_++;
  return Area{index, Mapping(m, kStubSharedSize)};
}

void Systrap::ReleaseArea(Area area) {
  // Area 0 is the template's, for its whole life.
  if (area.index == 0) return;
  // Zero it for the next stub and give its pages back. Should the host
  // refuse, the area is not reused.
  if (fallocate(areas_fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(area.index) * kStubSharedSize,
                kStubSharedSize) != 0) {
    return;
  }
  absl::MutexLock l(&areas_mu_);
  free_areas_.push_back(std::move(area));
}

uint32_t Systrap::areas_made() {
  absl::MutexLock l(&areas_mu_);
  return areas_made_;
}

absl::StatusOr<std::unique_ptr<StubProcess>> Systrap::CreateStub() {
  ASSIGN_OR_RETURN(Area area, TakeArea());
  auto* shared = static_cast<StubShared*>(area.map.addr());
  shared->config.has_fsgsbase = has_fsgsbase_ ? 1 : 0;
  shared->config.spin_cycles = spin_cycles_;  // the control thread's
  shared->control.owner = kOwnerSentry;

  const int64_t r = template_->Control(kOpNewStub, area.index);
  if (r < 0) {
    if (template_->dead()) {
      // It may have died after its clone: a stub of that clone could still
      // map this area, so it is not reused.
      return absl::UnavailableError(absl::StrCat(
          "systrap: no new stub process: the stub template (pid ",
          template_->pid(), ") is gone: ", template_->DeathReason()));
    }
    ReleaseArea(std::move(area));
    return ErrnoStatus(absl::StrCat("systrap: the stub template (pid ",
                                    template_->pid(),
                                    ") could not clone a stub process"),
                       static_cast<int>(-r));
  }
  return std::unique_ptr<StubProcess>(new StubProcess(
      this, static_cast<pid_t>(r), area.index, std::move(area.map)));
}

absl::StatusOr<std::unique_ptr<platform::Context>> Systrap::NewContext() {
  return std::unique_ptr<platform::Context>(new SystrapContext(this));
}

// ---------------------------------------------------------------------------
// StubProcess

StubProcess::StubProcess(Systrap* platform, pid_t pid, uint32_t area,
                         Mapping shared_map)
    : platform_(platform),
      pid_(pid),
      area_(area),
      shared_map_(std::move(shared_map)),
      shared_(static_cast<StubShared*>(shared_map_.addr())) {
  {
    absl::MutexLock l(&slots_mu_);
    used_slots_.set(0);  // the control thread's note (DeathReason)
    ever_used_.set(0);
  }
  // The ring's cells start free for the first lap (seq = position); the
  // area is zeroed and no worker exists yet.
  for (uint32_t i = 0; i < kRingSize; i++) shared_->ring.cells[i].seq = i;
  shared_->ready = kOwnerStub;
  {
    absl::MutexLock l(&platform_->live_mu_);
    platform_->live_.push_back(this);
  }
  reaper_ = std::thread([this] { Reap(); });
}

StubProcess::~StubProcess() {
  {
    absl::MutexLock l(&platform_->live_mu_);
    auto& live = platform_->live_;
    live.erase(std::find(live.begin(), live.end(), this));
  }
  kill(pid_, SIGKILL);
  reaper_.join();
  // Reaped: no process maps the area any more but those the application
  // made itself from stub code (README, "Processes"), all in this sandbox.
  platform_->ReleaseArea({area_, std::move(shared_map_)});
}

void StubProcess::Reap() {
  int status;
  while (waitpid(pid_, &status, __WALL) < 0 && errno == EINTR) {
  }
  exit_status_.store(status, std::memory_order_relaxed);
  dead_.store(true, std::memory_order_seq_cst);
  // Wake every Sentry thread that may sleep on this process: hand each
  // word to the Sentry so that a waiter about to sleep sees the change.
  StoreSeqCst(&shared_->control.owner, kOwnerSentry);
  Futex(&shared_->control.owner, FUTEX_WAKE, INT32_MAX);
  StoreSeqCst(&shared_->ready, kOwnerSentry);
  Futex(&shared_->ready, FUTEX_WAKE, INT32_MAX);
  // Only slots that were ever handed out: touching the others would make
  // the host allocate their pages of the shared area (2 MiB for all 256)
  // just to free them again, at every process exit.
  std::bitset<kMaxThreads> slots;
  {
    absl::MutexLock l(&slots_mu_);
    slots = ever_used_;
  }
  for (uint32_t i = 0; i < kMaxThreads; i++) {
    if (!slots.test(i)) continue;
    StoreSeqCst(&shared_->slots[i].owner, kOwnerSentry);
    Futex(&shared_->slots[i].owner, FUTEX_WAKE, INT32_MAX);
  }
}

void StubProcess::HandToStub(uint32_t* owner, uint32_t* stub_sleeping) {
  StoreSeqCst(owner, kOwnerStub);
  if (LoadSeqCst(stub_sleeping) != 0) Futex(owner, FUTEX_WAKE, 1);
}

bool StubProcess::WaitForSentry(uint32_t* owner, uint32_t* sentry_sleeping,
                                uint64_t spin_cycles) {
  if (spin_cycles != 0) {
    const uint64_t start = __rdtsc();
    while (LoadAcquire(owner) != kOwnerSentry) {
      if (__rdtsc() - start > spin_cycles) break;
      _mm_pause();
    }
  }
  if (LoadAcquire(owner) != kOwnerSentry) {
    StoreSeqCst(sentry_sleeping, 1);
    for (;;) {
      uint32_t v = LoadSeqCst(owner);
      if (v == kOwnerSentry) break;
      if (v != kOwnerStub && !corrupt_.exchange(true)) {
        // Overwritten by the application: FUTEX_WAIT on kOwnerStub would
        // return at once forever. End this sandbox's process; the reaper
        // then hands the word back (and wakes us below).
        kill(pid_, SIGKILL);
      }
      Futex(owner, FUTEX_WAIT, v);
    }
    StoreSeqCst(sentry_sleeping, 0);
  }
  return !dead();
}

void StubProcess::SampleGauges(int64_t* awake, int64_t* queued) {
  if (dead()) return;
  const uint32_t n = std::min(workers(), kMaxThreads - 1);
  for (uint32_t i = 1; i <= n; i++) {
    if (LoadAcquire(&shared_->workers[i].sleeping) == 0) ++*awake;
  }
  uint32_t tail;
  {
    absl::MutexLock l(&ring_mu_);
    tail = tail_;
  }
  // head is the stub's (untrusted): a count beyond the ring is no count.
  const uint32_t q = tail - LoadAcquire(&shared_->ring.head);
  if (q <= kRingSize) *queued += q;
}

void StubProcess::KillCorrupt(const char* why) {
  const char* none = nullptr;
  killed_for_.compare_exchange_strong(none, why);
  kill(pid_, SIGKILL);
}

std::string StubProcess::DeathReason() const {
  int st = exit_status_.load(std::memory_order_relaxed);
  if (const char* why = killed_for_.load(std::memory_order_relaxed)) {
    return absl::StrCat("stub process ", pid_, " killed: ", why);
  }
  if (corrupt_.load(std::memory_order_relaxed)) {
    return absl::StrCat(
        "stub process ", pid_,
        " killed: a hand-over word of its shared memory held neither owner "
        "value (overwritten by the application?)");
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == kStubExitCorrupt) {
    return absl::StrCat("stub process ", pid_,
                        " found a hand-over word of its shared memory "
                        "overwritten and exited");
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == kStubExitRing) {
    return absl::StrCat("stub process ", pid_,
                        " found its context ring inconsistent (an entry "
                        "naming no slot, or a slot of another generation: "
                        "overwritten by the application?) and exited");
  }
  if (WIFSIGNALED(st)) {
    return absl::StrCat("stub process ", pid_, " killed by signal ",
                        WTERMSIG(st));
  }
  if (WEXITSTATUS(st) == kStubExitNewStub) {
    return absl::StrCat("stub process ", pid_,
                        " could not set itself up after the template's clone "
                        "(the Sentry gone, or its shared area not mappable)");
  }
  if (WEXITSTATUS(st) == kStubExitControlSignal) {
    const ThreadSlot& s = shared_->slots[0];
    return absl::StrCat("stub process ", pid_,
                        ": its control thread took signal ", s.signo,
                        " (code ", s.sig_code, ", addr 0x", absl::Hex(s.fault_addr),
                        ") at 0x", absl::Hex(s.gregs[16]), " rbx=0x", absl::Hex(s.gregs[11]), " rsp=0x", absl::Hex(s.gregs[15]), " trapno=", s.gregs[20], " err=", s.gregs[19]);
  }
  return absl::StrCat("stub process ", pid_, " exited with status ",
                      WEXITSTATUS(st));
}

int64_t StubProcess::Control(ControlOp op, uint64_t a0, uint64_t a1,
                             uint64_t a2, uint64_t a3, uint64_t a4,
                             uint64_t a5) {
  absl::MutexLock l(&control_mu_);
  return ControlLocked(op, a0, a1, a2, a3, a4, a5);
}

int64_t StubProcess::ControlLocked(ControlOp op, uint64_t a0, uint64_t a1,
                                   uint64_t a2, uint64_t a3, uint64_t a4,
                                   uint64_t a5) {
  if (dead()) return -ESRCH;
  ControlBlock* cb = &shared_->control;
  cb->op = op;
  cb->args[0] = a0; cb->args[1] = a1; cb->args[2] = a2;
  cb->args[3] = a3; cb->args[4] = a4; cb->args[5] = a5;
  cb->result = -EIO;
  HandToStub(&cb->owner, &cb->stub_sleeping);
  if (!WaitForSentry(&cb->owner, &cb->sentry_sleeping,
                     platform_->spin_cycles())) {
    return -ESRCH;
  }
  return cb->result;
}

absl::Status StubProcess::MapFile(uintptr_t addr, int fd, off_t off,
                                  size_t len, platform::Prot prot) {
  return MapFiles(fd, {FileRange{addr, off, len, prot}});
}

bool StubProcess::QueueMaps(const std::vector<FileRange>& ranges) {
  if (defer_off_.load(std::memory_order_relaxed) ||
      contexts_.load(std::memory_order_acquire) != 1) {
    return false;
  }
  absl::MutexLock d(&defer_mu_);
  if (pending_.size() + ranges.size() > kMaxMapBatch) return false;
  for (const FileRange& f : ranges) {
    pending_.push_back(MapRequest{f.addr, f.len, static_cast<uint64_t>(f.off),
                                  static_cast<uint64_t>(f.prot.ToHost())});
  }
  any_pending_.store(true, std::memory_order_release);
  maps_deferred_.fetch_add(ranges.size(), std::memory_order_relaxed);
  return true;
}

void StubProcess::WaitInflightLocked() {
  if (inflight_ < 0) return;
  const uint32_t* maps = &shared_->slots[inflight_].maps;
  // The context is queued and a worker is on its way to it (README.md,
  // "The context queue": there is one for every entry); making a few maps
  // takes microseconds. A word that never clears was overwritten.
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (LoadAcquire(maps) != 0 && !dead()) {
    if (absl::Now() > deadline) {
      KillCorrupt("the maps queued for one of its contexts were never made "
                  "(its shared memory overwritten?)");
      break;
    }
    sched_yield();
  }
  inflight_ = -1;
}

void StubProcess::FlushMapsLocked() {
  WaitInflightLocked();
  if (pending_.empty()) return;
  int64_t r;
  {
    absl::MutexLock l(&control_mu_);
    std::copy(pending_.begin(), pending_.end(), shared_->map_batch);
    r = ControlLocked(kOpMmapBatch, pending_.size());
  }
  pending_.clear();
  any_pending_.store(false, std::memory_order_release);
  // Their callers were told they succeeded. A page of one that failed
  // faults again and is mapped, with its error reported, by the control
  // thread from now on.
  if (r < 0 && r > -4096) defer_off_.store(true, std::memory_order_relaxed);
}

void StubProcess::AttachMaps(int slot) {
  // Maps are queued by the thread that queues the context next (its fault
  // or syscall), before it gets here: it sees its own store.
  if (!any_pending_.load(std::memory_order_acquire)) return;
  absl::MutexLock d(&defer_mu_);
  if (pending_.empty()) return;
  WaitInflightLocked();
  std::copy(pending_.begin(), pending_.end(), shared_->deferred);
  __atomic_store_n(&shared_->slots[slot].maps,
                   static_cast<uint32_t>(pending_.size()), __ATOMIC_RELEASE);
  inflight_ = slot;
  pending_.clear();
  any_pending_.store(false, std::memory_order_release);
}

absl::Status StubProcess::MapFiles(int fd, const std::vector<FileRange>& ranges) {
  // The stub knows one file: the memory file, at kStubMemFileFd. The fd
  // argument is the Sentry's; it is accepted for the interface's sake.
  (void)fd;
  if (ranges.empty() || QueueMaps(ranges)) return absl::OkStatus();
  absl::MutexLock d(&defer_mu_);
  FlushMapsLocked();
  if (ranges.size() == 1) {
    const FileRange& f = ranges[0];
    int64_t r = Control(kOpMmap, f.addr, f.len, f.prot.ToHost(),
                        MAP_SHARED | MAP_FIXED, kStubMemFileFd, f.off);
    if (r < 0 && r > -4096) {
      return ErrnoStatus(absl::StrCat("systrap: mapping 0x", absl::Hex(f.addr),
                                      "+0x", absl::Hex(f.len), " in stub ",
                                      pid_),
                         static_cast<int>(-r));
    }
    return absl::OkStatus();
  }
  for (size_t i = 0; i < ranges.size(); i += kMaxMapBatch) {
    const size_t n = std::min<size_t>(kMaxMapBatch, ranges.size() - i);
    int64_t r;
    {
      // The batch is the control block's argument: written under its lock.
      absl::MutexLock l(&control_mu_);
      for (size_t j = 0; j < n; j++) {
        const FileRange& f = ranges[i + j];
        shared_->map_batch[j] = MapRequest{f.addr, f.len,
                                           static_cast<uint64_t>(f.off),
                                           static_cast<uint64_t>(f.prot.ToHost())};
      }
      r = ControlLocked(kOpMmapBatch, n);
    }
    if (r < 0 && r > -4096) {
      return ErrnoStatus(absl::StrCat("systrap: mapping ", n, " ranges from 0x",
                                      absl::Hex(ranges[i].addr), " in stub ",
                                      pid_),
                         static_cast<int>(-r));
    }
  }
  return absl::OkStatus();
}

void StubProcess::Unmap(uintptr_t addr, size_t len) {
  // After every map queued before it.
  absl::MutexLock d(&defer_mu_);
  FlushMapsLocked();
  Control(kOpMunmap, addr, len);
}

absl::Status StubProcess::StartFirstWorker() {
  // The first worker tells us the FPU layout of a fresh context (fp_init)
  // and then waits for the ring; it counts itself idle, so the first
  // Submit finds it.
  absl::MutexLock l(&start_mu_);
  if (started_) return absl::OkStatus();
  const uint32_t index = workers_.fetch_add(1) + 1;
  AddWorker(index, /*matched=*/false);
  if (!WaitForSentry(&shared_->ready, &shared_->ready_sleeping,
                     platform_->spin_cycles())) {
    return absl::UnavailableError(
        absl::StrCat("systrap: starting the first worker: ", DeathReason()));
  }
  started_ = true;
  return absl::OkStatus();
}

absl::StatusOr<int> StubProcess::NewThread() {
  RETURN_IF_ERROR(StartFirstWorker());
  int slot = -1;
  uint32_t generation = 0;
  {
    absl::MutexLock l(&slots_mu_);
    for (uint32_t i = 1; i < kMaxThreads; i++) {
      if (!used_slots_.test(i)) {
        used_slots_.set(i);
        ever_used_.set(i);
        slot = static_cast<int>(i);
        generation = generation_[i].fetch_add(1) + 1;
        break;
      }
    }
  }
  if (slot < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("systrap: all ", kMaxThreads - 1,
                     " context slots of stub ", pid_, " are in use"));
  }
  ThreadSlot* s = &shared_->slots[slot];
  s->sentry_sleeping = 0;
  s->interrupt = 0;
  s->running_tid = 0;
  s->trap = 0;
  s->stub_spin_cycles = 0;
  s->sentry_cpu = -1;
  s->self = SlotInStub(slot);
  s->gs_worker = 0;
  s->maps = 0;
  __atomic_store_n(&s->generation, generation, __ATOMIC_RELEASE);
  StoreSeqCst(&s->owner, kOwnerSentry);
  contexts_.fetch_add(1, std::memory_order_acq_rel);
  return slot;
}

void StubProcess::ReleaseThread(int slot) {
  if (slot <= 0 || slot >= static_cast<int>(kMaxThreads)) return;
  absl::MutexLock l(&slots_mu_);
  // Not queued (the Sentry holds it): moving the generation on is enough
  // for no stale entry to be taken for the next context in this slot.
  __atomic_store_n(&shared_->slots[slot].generation,
                   generation_[slot].fetch_add(1) + 1, __ATOMIC_RELEASE);
  used_slots_.reset(slot);
  contexts_.fetch_sub(1, std::memory_order_acq_rel);
}

void StubProcess::AddWorker(uint32_t index, bool matched) {
  StubWorker* w = &shared_->workers[index];
  w->self = WorkerInStub(index);
  w->stack_top = kStubStacks + (index + 1) * kStackSize - 64;
  w->ctx = 0;
  w->ctx_index = 0;
  w->patch_state = kPatchIdle;
  w->sleeping = 0;
  __atomic_store_n(&w->matched, matched ? 1u : 0u, __ATOMIC_RELEASE);
  __atomic_store_n(&shared_->ring.workers, index, __ATOMIC_RELAXED);
  const int64_t r = Control(kOpClone, index);
  if (r < 0 && !dead()) {
    // Host limits (threads, memory): an entry matched to this worker would
    // never be taken. End the sandbox's process rather than hang it.
    KillCorrupt("the host refused a new stub worker (clone failed)");
  }
}

bool StubProcess::Submit(int slot) {
  AttachMaps(slot);
  const uint32_t generation = generation_[slot].load(std::memory_order_relaxed);
  ContextRing* ring = &shared_->ring;
  {
    absl::MutexLock l(&ring_mu_);
    const uint32_t pos = tail_;
    RingCell* c = &ring->cells[pos & (kRingSize - 1)];
    // Free for this lap, or the ring is full, which it cannot be (more
    // cells than contexts): overwritten by the application.
    if (LoadAcquire(&c->seq) != pos) {
      KillCorrupt("its context ring was inconsistent (the cell at the tail "
                  "was not free: overwritten by the application?)");
      return false;
    }
    c->ctx_index = static_cast<uint32_t>(slot);
    c->generation = generation;
    __atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);  // published
    tail_ = pos + 1;
    __atomic_store_n(&ring->tail, pos + 1, __ATOMIC_RELAXED);
  }
  // Sleeping workers wait on `futex`; it moves after the entry is
  // published and before we look for sleepers (README.md, "The context
  // queue": no lost wakeup).
  __atomic_fetch_add(&ring->futex, 1, __ATOMIC_SEQ_CST);
  uint32_t idle = LoadSeqCst(&ring->waiting);
  while (idle > 0) {
    if (__atomic_compare_exchange_n(&ring->waiting, &idle, idle - 1, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      // Matched with an idle worker. If more are idle than asleep, one is
      // spinning or on its way to sleep, and it looks at the ring before
      // it sleeps (after sleepers++, which we would have seen): no wakeup
      // needed. Else wake one (a spinner may still take the entry first;
      // the woken one then sleeps again).
      if (LoadSeqCst(&ring->sleepers) >= idle) {
        Futex(&ring->futex, FUTEX_WAKE, 1);
      }
      return true;
    }
  }
  // Every worker is busy: add one for this entry (without waiting for it;
  // any worker may take the entry first). Bounded by the slots.
  uint32_t n = workers_.load(std::memory_order_acquire);
  do {
    if (n >= kMaxThreads - 1) {
      // As many workers as contexts: one of them will be free.
      if (LoadSeqCst(&ring->sleepers) != 0) Futex(&ring->futex, FUTEX_WAKE, 1);
      return true;
    }
  } while (!workers_.compare_exchange_weak(n, n + 1));
  AddWorker(n + 1, /*matched=*/true);
  return true;
}

// ---------------------------------------------------------------------------
// SystrapContext

Event SystrapContext::Switch(platform::AddressSpace& as_base, CpuState& cpu) {
  auto& as = static_cast<StubProcess&>(as_base);
  for (;;) {
    Event ev = SwitchOnce(as, cpu);
    if (!platform_->patching()) return ev;
    if (ev.kind == Event::Kind::kSyscall && !last_patched_) {
      as.CountSyscallSite(cpu);
    } else if (ev.kind == Event::Kind::kException && ev.signo == SIGILL) {
      // A thread caught by a patch in progress, or sent back onto a
      // patched site's `syscall` by a restart: never the program's SIGILL.
      bool as_syscall = false;
      if (as.RestartPatchedSite(cpu, &as_syscall)) {
        if (!as_syscall) continue;
        ev.kind = Event::Kind::kSyscall;
        ev.signo = SIGSYS;
      }
    }
    return ev;
  }
}

Event SystrapContext::SwitchOnce(StubProcess& as, CpuState& cpu) {
  Event ev;
  last_patched_ = false;
  if (stub_ != &as) {
    Release();
    absl::StatusOr<int> slot = as.NewThread();
    if (!slot.ok()) {
      ev.kind = Event::Kind::kDead;
      ev.detail = std::string(slot.status().message());
      return ev;
    }
    stub_ = &as;
    slot_ = *slot;
    if (cpu.fp_size == 0) {
      // The first worker's FPU image gives the layout; reset its values.
      uint32_t n = as.shared()->fp_init_size;
      if (n > sizeof(cpu.fp) || n > kMaxFpSize) n = 0;
      cpu.fp_size = n;
      std::memcpy(cpu.fp, as.shared()->fp_init, n);
      cpu.ResetFp();
    }
    // A fork's child runs patched text from its first instruction: its stub
    // must know the xsave mask before it runs any.
    if (platform_->patching()) as.SetXsaveMask(cpu);
  }
  ThreadSlot* s = &as.shared()->slots[slot_];
  // The interrupt protocol (README.md, "The context queue"): the slot's
  // flag is cleared before running_ is set, so an Interrupt() that comes
  // after our check of interrupt_ below sets it again for the worker.
  StoreSeqCst(&s->interrupt, 0);
  running_.store(true, std::memory_order_seq_cst);
  if (interrupt_.exchange(false, std::memory_order_seq_cst)) {
    running_.store(false, std::memory_order_seq_cst);
    ev.kind = Event::Kind::kInterrupted;
    return ev;
  }
  RegsToGregs(cpu.regs, s->gregs);
  s->fs_base = cpu.regs.fs_base;
  // With patching, a context whose GS base is 0 runs with its worker's
  // record there: the patched entry finds the worker through it.
  s->gs_worker = platform_->patching() && cpu.regs.gs_base == 0 ? 1 : 0;
  s->gs_base = cpu.regs.gs_base;
  uint32_t fp_size = cpu.fp_size <= sizeof(s->fp) ? cpu.fp_size : 0;
  s->fp_size = fp_size;
  std::memcpy(s->fp, cpu.fp, fp_size);

  // The fast path: whether the stub spins at its next wait for us, and
  // whether we spin now waiting for its next trap.
  FastPath& fp = platform_->fastpath();
  int host_cpu;
  const uint64_t give = RdtscpCpu(&host_cpu);
  const uint64_t give_ns = platform_->TscToNs(give);
  s->sentry_cpu = host_cpu;
  s->stub_spin_cycles = fp.ShouldSpin(Side::kStub, give_ns, -1, -1)
                            ? platform_->spin_cycles()
                            : 0;
  const int stub_cpu = __atomic_load_n(&s->stub_cpu, __ATOMIC_RELAXED);
  const bool spin = fp.ShouldSpin(Side::kSentry, give_ns, host_cpu, stub_cpu);
  StoreSeqCst(&s->owner, kOwnerStub);
  // A process reaped before that store has handed its slots back already:
  // then nothing would hand this one back. Reaped after it, the reaper's
  // hand-back ends our wait (it sets dead before it hands back).
  bool alive = !as.dead();
  if (alive) {
    as.Submit(slot_);  // if it fails, the process is killed: as above
    alive = as.WaitForSentry(&s->owner, &s->sentry_sleeping,
                             spin ? platform_->spin_cycles() : 0);
  }
  const uint64_t take = __rdtsc();
  running_.store(false, std::memory_order_seq_cst);
  if (!alive) {
    ev.kind = Event::Kind::kDead;
    ev.detail = as.DeathReason();
    return ev;
  }
  if (s->trap == kTrapMapFailed) {
    // Maps queued for it failed in the worker; it has not run, and the
    // slot still holds what we wrote. From now on every map of this
    // process goes through the control thread, which reports its error:
    // run it again, and its fault on what is not mapped says the rest.
    as.defer_off_.store(true, std::memory_order_relaxed);
    return SwitchOnce(as, cpu);
  }
  RecordHandOvers(*s, give, take, spin);

  // Everything read here may have been written by the application.
  GregsToRegs(s->gregs, cpu.regs);
  cpu.regs.fs_base = s->stub_fs_base;
  cpu.regs.gs_base = s->stub_gs_base;
  if (platform_->patching() && IsWorkerRecord(cpu.regs.gs_base)) {
    cpu.regs.gs_base = 0;
  }
  uint32_t got = s->fp_size;
  if (got == cpu.fp_size && got <= sizeof(cpu.fp)) {
    std::memcpy(cpu.fp, s->fp, got);
  }
  int signo = s->signo;
  ev.signo = signo;
  ev.code = s->sig_code;
  ev.addr = s->fault_addr;
  if (s->trap == kTrapPatched) {
    // A syscall by a patched site: the same as a SIGSYS from seccomp.
    last_patched_ = true;
    ev.kind = Event::Kind::kSyscall;
    ev.signo = SIGSYS;
    cpu.regs.orig_rax = static_cast<uint64_t>(static_cast<int64_t>(s->sys_nr));
    return ev;
  }
  if (s->trap != kTrapSignal) {
    ev.kind = Event::Kind::kInterrupted;
    return ev;
  }
  switch (signo) {
    case SIGSYS:
      ev.kind = Event::Kind::kSyscall;
      cpu.regs.orig_rax = static_cast<uint64_t>(static_cast<int64_t>(s->sys_nr));
      break;
    case SIGSEGV:
      if (ev.code == SEGV_MAPERR || ev.code == SEGV_ACCERR) {
        ev.kind = Event::Kind::kFault;
        uint64_t err = s->gregs[kErr];
        ev.write = (err & 2) != 0;
        ev.exec = (err & 16) != 0;
      } else {
        ev.kind = Event::Kind::kException;
      }
      break;
    case kInterruptSignal:
      ev.kind = Event::Kind::kInterrupted;
      interrupt_.store(false, std::memory_order_seq_cst);
      break;
    default:
      ev.kind = Event::Kind::kException;
      break;
  }
  return ev;
}

void SystrapContext::RecordHandOvers(const ThreadSlot& s, uint64_t give,
                                     uint64_t take, bool spun) {
  // The stub's timestamps are untrusted: only values inside this round trip
  // are latencies.
  FastPath& fp = platform_->fastpath();
  const uint64_t submit = __atomic_load_n(&s.submit_tsc, __ATOMIC_RELAXED);
  const uint64_t wake = __atomic_load_n(&s.wake_tsc, __ATOMIC_RELAXED);
  const bool stub_spun = __atomic_load_n(&s.stub_spun, __ATOMIC_RELAXED) != 0;
  if (give <= submit && submit <= take) {
    uint64_t ns = platform_->TscToNs(take - submit);
    if (ns < kMaxLatencyNs) fp.Record(Side::kSentry, spun, ns);
  }
  if (give <= wake && wake <= take) {
    uint64_t ns = platform_->TscToNs(wake - give);
    if (ns < kMaxLatencyNs) fp.Record(Side::kStub, stub_spun, ns);
  }
  fp.OnSubmit(platform_->TscToNs(take));
}

void SystrapContext::Interrupt() {
  interrupt_.store(true, std::memory_order_seq_cst);
  if (running_.load(std::memory_order_seq_cst)) {
    StubProcess* stub = stub_;
    if (stub == nullptr) return;
    // The worker stores running_tid and then reads the flag: either it sees
    // the flag when it takes the context, or we see its tid here. A tid
    // that has moved on to another context ignores the signal (stale).
    ThreadSlot* s = &stub->shared()->slots[slot_];
    StoreSeqCst(&s->interrupt, 1);
    const pid_t tid = __atomic_load_n(&s->running_tid, __ATOMIC_SEQ_CST);
    if (tid > 0) syscall(SYS_tgkill, stub->pid(), tid, kInterruptSignal);
  }
}

void SystrapContext::Release() {
  if (stub_ != nullptr) {
    stub_->ReleaseThread(slot_);
    stub_ = nullptr;
    slot_ = -1;
  }
}

}  // namespace sandboxd::systrap
