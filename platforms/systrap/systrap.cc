#include "platforms/systrap/systrap.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/mman.h>
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
#include "base/thread.h"
#include "platforms/systrap/seccomp_filter.h"
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/template_signal_safe.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::systrap {
namespace {


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

}  // namespace

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
  // The filter every stub adds to the template's (layout.h).
  const std::vector<sock_filter>& stub_filter = StubProcessFilter();
  static_assert(sizeof(sock_filter) == sizeof(uint64_t));
  if (stub_filter.size() > kMaxStubFilterLen) {
    return absl::InternalError(absl::StrCat(
        "systrap: the stub-process filter has ", stub_filter.size(),
        " instructions, more than kMaxStubFilterLen"));
  }
  shared->stub_filter.len = static_cast<uint32_t>(stub_filter.size());
  std::memcpy(shared->stub_filter.insns, stub_filter.data(),
              stub_filter.size() * sizeof(sock_filter));
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
  RETURN_IF_ERROR(p->template_->StartReaper());
  // After the fork: the template must be forked while we have one thread.
  if (fastpath == FastPathMode::kTimer) {
    Systrap* raw = p.get();
    ASSIGN_OR_RETURN(p->timer_,
                     StartThread("systrap's fast-path timer",
                                 [raw] { raw->TimerLoop(); }));
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
      // Without it (the host refused a thread) stubs are made on demand.
      absl::StatusOr<std::thread> th = StartThread(
          "systrap's stub pool refiller", [this] { RefillLoop(); });
      if (th.ok()) refiller_ = std::move(*th);
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
  // Its first worker now rather than at the first switch (which needs it
  // anyway): a host that refuses it fails the fork with EAGAIN instead of
  // killing the child.
  RETURN_IF_ERROR((*s)->StartFirstWorker());
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
  std::unique_ptr<StubProcess> s(new StubProcess(
      this, static_cast<pid_t>(r), area.index, std::move(area.map)));
  RETURN_IF_ERROR(s->StartReaper());  // or the destructor kills and reaps it
  return s;
}

absl::StatusOr<std::unique_ptr<platform::Context>> Systrap::NewContext() {
  return std::unique_ptr<platform::Context>(new SystrapContext(this));
}

}  // namespace sandboxd::systrap
