// The systrap platform: application threads run as threads of stub
// processes; every syscall and fault becomes a host signal in the stub,
// whose handler hands the thread's state to the Sentry through shared memory
// (layout.h) and waits for the reply.
//
// Processes: the Sentry forks a *template* early, while it has one thread.
// The template turns itself into a minimal stub: only the stub region
// mapped, the seccomp filter installed, its loop in stub code. For every
// new address space it clones a stub process (a child of the Sentry, by
// CLONE_PARENT) that inherits all of that, maps its own shared area from
// the pool and runs the stub's control thread. Application threads are
// contexts (slots of the shared area) that the Sentry queues in the stub's
// ring; the stub's workers, threads made by the control thread as load
// requires, take and run them (README.md, "The context queue").
//
// Lock order: StubProcess::start_mu_ > StubProcess::add_mu_ >
// StubProcess::control_mu_; StubProcess::defer_mu_ >
// StubProcess::control_mu_ >
// StubProcess::slots_mu_; StubProcess::ring_mu_ is a leaf;
// Systrap::pool_mu_ > Systrap::live_mu_ > StubProcess::slots_mu_;
// Systrap::areas_mu_ is a leaf.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_SYSTRAP_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_SYSTRAP_H_

#include <sys/types.h>

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/mapping.h"
#include "base/unique_fd.h"
#include "platforms/code_patcher.h"
#include "platforms/platform.h"
#include "platforms/systrap/fastpath.h"
#include "platforms/systrap/layout.h"
#include "platforms/systrap/patch.h"
#include "platforms/systrap/stats.h"

namespace sandboxd::systrap {

class Systrap;

// One stub process: the host side of one application address space.
class StubProcess : public platform::AddressSpace,
                    public platform::PatchingAddressSpace {
 public:
  ~StubProcess() override;

  absl::Status MapFile(uintptr_t addr, int fd, off_t off, size_t len,
                       platform::Prot prot) override;
  // Up to kMaxMapBatch ranges per request to the control thread; or, while
  // one context runs in this process, queued for the worker that takes it
  // next ("maps on the way back", README.md).
  absl::Status MapFiles(int fd, const std::vector<FileRange>& ranges) override;
  void Unmap(uintptr_t addr, size_t len) override;
  void SetCodePatcher(platform::CodePatcher* patcher) override {
    patcher_.store(patcher, std::memory_order_release);
  }
  void* FindFeature(platform::FeatureTag tag) override {
    return platform::OfferFeature<platform::PatchingAddressSpace>(this, tag);
  }

  pid_t pid() const { return pid_; }
  bool dead() const { return dead_.load(std::memory_order_acquire); }
  StubShared* shared() const { return shared_; }
  // Why the process ended (valid once dead()).
  std::string DeathReason() const;
  // Adds this process's workers that are awake (not asleep on the ring)
  // and the contexts queued in its ring and not yet taken (Stats' gauges).
  void SampleGauges(int64_t* awake, int64_t* queued);
  // Workers made so far (they are never trimmed).
  uint32_t workers() const { return workers_.load(std::memory_order_acquire); }
  // Maps made on the way back so far, and whether that was turned off (a
  // deferred map failed: every map then goes through the control thread,
  // which reports its error to the caller).
  uint64_t maps_deferred() const {
    return maps_deferred_.load(std::memory_order_relaxed);
  }
  bool deferral_off() const {
    return defer_off_.load(std::memory_order_relaxed);
  }

  // Runs one request on the control thread; returns its result or -errno.
  int64_t Control(ControlOp op, uint64_t a0 = 0, uint64_t a1 = 0,
                  uint64_t a2 = 0, uint64_t a3 = 0, uint64_t a4 = 0,
                  uint64_t a5 = 0);
  // Control, for a caller that wrote more of the request (map_batch)
  // under the same lock.
  int64_t ControlLocked(ControlOp op, uint64_t a0 = 0, uint64_t a1 = 0,
                        uint64_t a2 = 0, uint64_t a3 = 0, uint64_t a4 = 0,
                        uint64_t a5 = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);

  // Takes a free context slot (the first one of a process also starts the
  // first worker and waits for it). Returns the slot index.
  // ResourceExhausted when the host refused this process a worker since
  // its last one was made and refuses the one made here for the new
  // context too (clone then fails with EAGAIN: README.md, "A worker the
  // host refuses").
  absl::StatusOr<int> NewThread();
  // Starts the process's first worker (the first NewThread does it when
  // nobody did before): a clone and its FPU image, ~0.1-0.3 ms that a
  // pooled process pays ahead, off the path of the exec or fork that takes
  // it.
  absl::Status StartFirstWorker();
  // Frees a context slot the Sentry holds (its generation moves on, so a
  // stale ring entry for it cannot be taken).
  void ReleaseThread(int slot);
  // Queues the context in `slot` (written, owner kOwnerStub) for a worker:
  // wakes an idle one or adds one. False if the ring was found corrupted
  // (the process is then killed; its reaper hands the slot back). If the
  // host refused the worker it needed, *unmatched_pos (when given) is the
  // entry's ring position, else -1: the entry waits for the next worker
  // that hands a context back (WaitForContext preempts one if none does).
  bool Submit(int slot, int64_t* unmatched_pos = nullptr);

  // Waits until *owner == kOwnerSentry or the process died: spins for
  // spin_cycles (TSC; 0: not at all), then sleeps on the futex. Returns
  // false if it died, or if *owner held neither owner value (the shared
  // memory was overwritten): then the process is killed.
  bool WaitForSentry(uint32_t* owner, uint32_t* sentry_sleeping,
                     uint64_t spin_cycles);
  // WaitForSentry for a context's slot `s` while it runs. Sleeps in
  // kInterruptRetryNs steps; while `interrupted` is set, each step that
  // times out sends the running worker the interrupt signal again, and
  // after kInterruptRetries of them the process is killed (a worker that
  // does not take it has its host signals blocked: README.md, "What the
  // filter allows").
  // `unmatched_pos` (>= 0): Submit found no worker for the entry at that
  // ring position; while it is not taken, every kStarvedRetryNs another
  // context of the process running in the stub is interrupted, so that
  // its worker comes back and takes the entry (time-slicing among the
  // workers the host gave).
  bool WaitForContext(ThreadSlot* s, uint64_t spin_cycles,
                      const std::atomic<bool>& interrupted,
                      int64_t unmatched_pos = -1);
  static constexpr long kInterruptRetryNs = 50 * 1000 * 1000;
  static constexpr long kStarvedRetryNs = 10 * 1000 * 1000;
  // Tests: the next `n` worker clones are taken as refused by the host.
  void RefuseWorkersForTesting(int n) { refuse_for_testing_.store(n); }
  // Workers the host refused this process (clone failed).
  uint64_t workers_refused() const {
    return workers_refused_.load(std::memory_order_relaxed);
  }
  static constexpr int kInterruptRetries = 40;
  // Hands *owner to the stub and wakes it if it sleeps.
  static void HandToStub(uint32_t* owner, uint32_t* stub_sleeping);

 private:
  friend class Systrap;
  friend class SystrapContext;
  // `area`: the index of its shared area in the platform's pool, mapped
  // here at `shared_map`.
  StubProcess(Systrap* platform, pid_t pid, uint32_t area, Mapping shared_map);
  // The thread that waits for the process's death; without one (the host
  // refused it) the process is not used and the destructor reaps it.
  absl::Status StartReaper();
  void Reap();
  // Makes the next worker (Control(kOpClone)); matched: made for a queued
  // entry. kRefused: the host refused it (the worker count is as before).
  enum class AddResult { kMade, kAtBound, kRefused };
  AddResult AddWorker(bool matched);
  // Interrupts one context other than `except` that runs in the stub
  // (round robin), so that its worker comes back to the ring.
  void PreemptOne(int except);
  // Kills the process for a corrupted shared structure; `why` is kept for
  // DeathReason.
  void KillCorrupt(const char* why);
  // Submit found the cell at its tail held: true once the worker that
  // took the previous lap's entry there frees it (bounded wait), false if
  // the cell holds anything else (StubProcess::Submit kills the process).
  bool WaitForLappedCell(ContextRing* ring, RingCell* c, uint32_t pos);

  // Syscall patching (patching.cc). Counts a SIGSYS at cpu's rip and
  // patches the site when it is hot.
  void CountSyscallSite(const platform::CpuState& cpu);
  // A SIGILL: if it is a thread caught at a site this address space is
  // patching or patched (patch.h, WritePatch), sets cpu to rerun it and
  // returns true; *as_syscall: it is restart_syscall, to be handled as
  // that syscall with cpu as it now is.
  bool RestartPatchedSite(platform::CpuState& cpu, bool* as_syscall);
  void TryPatch(uint64_t site, uint32_t sysno, const platform::CpuState& cpu);
  // Tells the stub the xsave mask of its threads' FPU images (`cpu`'s
  // layout), once; false if that image is not an xsave signal frame's.
  bool SetXsaveMask(const platform::CpuState& cpu);

  Systrap* const platform_;
  const pid_t pid_;
  const uint32_t area_;
  Mapping shared_map_;
  StubShared* const shared_;
  std::atomic<bool> dead_{false};
  std::atomic<bool> corrupt_{false};  // killed for a corrupted hand-over word
  std::atomic<const char*> killed_for_{nullptr};  // KillCorrupt's reason
  std::atomic<int> exit_status_{0};
  std::thread reaper_;

  // Maps on the way back. Queues `ranges` if this process has exactly one
  // context (no other thread can run before the worker that takes it makes
  // them) and there is room; false: the caller maps through the control
  // thread.
  bool QueueMaps(const std::vector<FileRange>& ranges);
  // Makes what is queued through the control thread, after waiting for a
  // batch handed to a queued context to be made: every request that
  // follows (munmap, another map, a clone) then sees the maps made before
  // it, in order.
  void FlushMapsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(defer_mu_);
  void WaitInflightLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(defer_mu_);
  // Hands what is queued to the context in `slot`, about to be queued.
  void AttachMaps(int slot);

  absl::Mutex start_mu_ ABSL_ACQUIRED_BEFORE(control_mu_);
  bool started_ ABSL_GUARDED_BY(start_mu_) = false;  // the first worker
  absl::Mutex defer_mu_ ABSL_ACQUIRED_BEFORE(control_mu_);
  std::vector<MapRequest> pending_ ABSL_GUARDED_BY(defer_mu_);
  // !pending_.empty(), readable without the lock: Submit, on every
  // syscall's way back, takes defer_mu_ only when there is something.
  std::atomic<bool> any_pending_{false};
  // The slot whose ThreadSlot::maps may still be unmade (-1: none).
  int inflight_ ABSL_GUARDED_BY(defer_mu_) = -1;
  std::atomic<int> contexts_{0};  // context slots in use
  std::atomic<bool> defer_off_{false};
  std::atomic<uint64_t> maps_deferred_{0};
  absl::Mutex control_mu_ ABSL_ACQUIRED_BEFORE(slots_mu_);
  // Producers of the ring. The tail lives here, not in shared memory, so
  // that nothing the application writes can make a Sentry thread spin.
  absl::Mutex ring_mu_;
  uint32_t tail_ ABSL_GUARDED_BY(ring_mu_) = 0;
  std::atomic<uint32_t> workers_{0};  // made (or being made)
  // Serializes the making of workers: an index the host refused is given
  // back (workers_ goes down again) before the next one is tried.
  absl::Mutex add_mu_ ABSL_ACQUIRED_BEFORE(control_mu_);
  // A worker clone failed and no worker was made since: a new context
  // then needs one made for it first (NewThread).
  std::atomic<bool> worker_refused_{false};
  // Entries published without a worker matched to them, whose taker
  // counted itself idle (`waiting`) for nothing: Submit takes that many
  // off `waiting` before it matches.
  std::atomic<uint32_t> owed_idle_{0};
  std::atomic<uint64_t> workers_refused_{0};
  std::atomic<int> refuse_for_testing_{0};
  std::atomic<uint32_t> preempt_cursor_{0};
  absl::Mutex slots_mu_;
  // Each slot's generation, the Sentry's own copy (the shared one is what
  // workers check ring entries against). Written under slots_mu_, read by
  // Submit without it (the slot is the caller's).
  std::atomic<uint32_t> generation_[kMaxThreads] = {};
  std::bitset<kMaxThreads> used_slots_ ABSL_GUARDED_BY(slots_mu_);
  // Slots handed out at least once: the only ones a Sentry thread can be
  // waiting on, and the only ones whose pages of the shared area exist.
  std::bitset<kMaxThreads> ever_used_ ABSL_GUARDED_BY(slots_mu_);

  // Syscall patching: the memory manager (set by it), and the traps per
  // site. The record of patched sites is the memory's own (the table, read
  // through the patcher), so that fork and execve need nothing here.
  std::atomic<platform::CodePatcher*> patcher_{nullptr};
  SiteCounter site_counter_{kPatchThreshold};
  std::atomic<bool> xsave_set_{false};
};

// One application thread: a context slot of the stub process of its
// address space.
class SystrapContext : public platform::Context {
 public:
  explicit SystrapContext(Systrap* platform) : platform_(platform) {}
  ~SystrapContext() override { Release(); }

  platform::Event Switch(platform::AddressSpace& as,
                         platform::CpuState& cpu) override;
  // Takes the context slot in `as` (and a worker, if the host refused the
  // process one before): a refusal fails the clone with EAGAIN.
  absl::Status Prepare(platform::AddressSpace& as) override;
  void Interrupt() override;
  void Release() override;

 private:
  // Feeds the fast path the two hand-overs of one round trip: ours to the
  // stub at TSC `give` (seen by the stub at s.wake_tsc) and the stub's back
  // (published at s.submit_tsc, seen by us at `take`); `spun`: we spun.
  void RecordHandOvers(const ThreadSlot& s, uint64_t give, uint64_t take,
                       bool spun);
  // One round trip to the stub; Switch adds syscall patching around it.
  platform::Event SwitchOnce(StubProcess& as, platform::CpuState& cpu);

  Systrap* const platform_;
  // Owned by the task's host thread (Switch/Release); Interrupt reads
  // stub_ and slot_ only while running_ is set.
  StubProcess* stub_ = nullptr;
  int slot_ = -1;
  bool fresh_ = false;  // slot_ taken, not run yet: FPU layout to set
  std::atomic<bool> running_{false};
  std::atomic<bool> interrupt_{false};
  bool last_patched_ = false;  // the last syscall came by a patched site
};

// Reserves the stub window in the calling process (PROT_NONE), so that
// nothing else is mapped there and stubs forked later can map it with
// MAP_FIXED. Call it first thing in main(), before large mappings; Create
// calls it too. Idempotent.
absl::Status ReserveStubWindow();

class Systrap : public platform::Platform {
 public:
  // Forks the stub template. Must be called while the calling process has
  // a single thread (the fork copies the whole process; the template then
  // drops all of it but the stub region). `memfile_fd` is the sandbox's
  // memory file.
  // `fastpath` chooses how waiters decide to spin (fastpath.h).
  static absl::StatusOr<std::unique_ptr<Systrap>> Create(
      int memfile_fd, FastPathMode fastpath = FastPathMode::kAdaptive);
  ~Systrap() override;

  std::string Name() const override { return "systrap"; }
  uintptr_t MaxUserAddress() const override { return kStubBase; }
  // A context slot each (slot 0 is the control thread's).
  uint32_t MaxThreadsPerAddressSpace() const override {
    return kMaxThreads - 1;
  }
  absl::StatusOr<std::unique_ptr<platform::AddressSpace>> NewAddressSpace()
      override;
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override;

  // How long a waiter spins when it spins at all (TSC cycles; 0 when the
  // sandbox may use one CPU only).
  uint64_t spin_cycles() const { return spin_cycles_; }
  FastPath& fastpath() { return *fastpath_; }
  // TSC cycles to ns (an origin-free conversion for the fast path's clock).
  uint64_t TscToNs(uint64_t cycles) const {
    return static_cast<uint64_t>(
        (static_cast<unsigned __int128>(cycles) * ns_per_cycle_q32_) >> 32);
  }
  // The counters; samples the gauges first.
  const Stats& stats();
  // stats() as the SentryStats' PlatformStats (stats.h's ToProto).
  void ExportStats(control::PlatformStats* out) override;

  // How many stub processes to keep made ahead of need (default
  // kDefaultPoolSize; 0: none). The pool starts at the second
  // NewAddressSpace (the program's first fork or exec: a program that
  // never makes a process pays nothing), and a background thread refills it
  // whenever NewAddressSpace takes one, so that fork and execve do not wait
  // for the template's clone, the shared area and the reaper thread.
  static constexpr size_t kDefaultPoolSize = 2;
  void set_pool_size(size_t n);
  // Makes one stub process now and keeps it in the pool for the next
  // NewAddressSpace, which then costs no clone: a warm Sentry (sentry
  // serve) does this while it waits in sandboxd's pool, so that its
  // sandbox's first address space is ready before anyone asks.
  absl::Status MakeSpareStub();
  absl::StatusOr<bool> PrepareAddressSpace() override {
    absl::Status s = MakeSpareStub();
    if (!s.ok()) return s;
    return true;
  }

  // Syscall patching (--systrap-patch=on; README.md): hot `mov $nr,%eax;
  // syscall` sites are rewritten to enter the stub without a signal.
  // Refused (false, *why) where the CPU lacks FSGSBASE or xsave. Set it
  // before the first address space is made.
  bool set_patching(bool on, std::string* why);
  bool patching() const { return patching_; }
  void MeasureAppCpu(bool on) override { measure_cpu_ = on; }
  bool measure_cpu() const { return measure_cpu_; }
  // The template's host pid (tests kill it to see the error).
  pid_t template_pid() const { return template_->pid(); }
  // Shared areas made so far (the template's included); a stub's area is
  // reused once the stub is gone, so this stays near the peak number of
  // stub processes alive at once.
  uint32_t areas_made();

 private:
  friend class StubProcess;  // registers itself in live_, returns its area
  // One shared area of the pool and the Sentry's mapping of it.
  struct Area {
    uint32_t index;
    Mapping map;
  };
  Systrap() = default;
  // Makes one stub process through the template.
  absl::StatusOr<std::unique_ptr<StubProcess>> CreateStub();
  // A zeroed shared area: a free one, or a new one at the end of the pool.
  absl::StatusOr<Area> TakeArea() ABSL_LOCKS_EXCLUDED(areas_mu_);
  // Frees the pages of an area whose stub process has been reaped and
  // keeps it for the next stub.
  void ReleaseArea(Area area) ABSL_LOCKS_EXCLUDED(areas_mu_);
  void RefillLoop();
  // --systrap-fastpath=timer: evaluates the fast path every 400 us.
  void TimerLoop();

  // Every StubProcess alive, for the gauges of stats().
  absl::Mutex live_mu_ ABSL_ACQUIRED_BEFORE(StubProcess::slots_mu_);
  std::vector<StubProcess*> live_ ABSL_GUARDED_BY(live_mu_);

  std::unique_ptr<FastPath> fastpath_;
  uint64_t ns_per_cycle_q32_ = 0;  // ns per TSC cycle, 32.32 fixed point
  absl::Mutex timer_mu_;
  bool timer_stop_ ABSL_GUARDED_BY(timer_mu_) = false;
  std::thread timer_;

  absl::Mutex pool_mu_ ABSL_ACQUIRED_BEFORE(live_mu_);
  std::vector<std::unique_ptr<StubProcess>> pool_ ABSL_GUARDED_BY(pool_mu_);
  size_t pool_size_ ABSL_GUARDED_BY(pool_mu_) = kDefaultPoolSize;
  uint64_t address_spaces_made_ ABSL_GUARDED_BY(pool_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(pool_mu_) = false;
  std::thread refiller_;  // started with the pool

  // The pool of shared areas: one memfd, area i at offset
  // i * kStubSharedSize, grown on demand. The template holds it (as
  // kStubPoolFd) so that a new stub can map its own area; the stub closes
  // it before any application code runs.
  UniqueFd areas_fd_;
  absl::Mutex areas_mu_;
  std::vector<Area> free_areas_ ABSL_GUARDED_BY(areas_mu_);
  uint32_t areas_made_ ABSL_GUARDED_BY(areas_mu_) = 0;
  // The stub template, itself a stub process (on area 0) whose control
  // loop (stub/template_stub.cc) answers kOpNewStub with a new stub's pid.
  // Its Control() serializes the requests.
  std::unique_ptr<StubProcess> template_;
  uint64_t spin_cycles_ = 0;
  bool has_fsgsbase_ = false;
  bool patching_ = false;
  bool measure_cpu_ = false;  // Event::app_cpu_ns (Platform::MeasureAppCpu)
};

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_SYSTRAP_H_
