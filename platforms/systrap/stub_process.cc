// StubProcess: a stub process as the platform::AddressSpace of one
// application process, its control thread (maps, unmaps, new threads) and
// the thread slots its workers hand over through.
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "platforms/systrap/shared_words.h"
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {

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
}

absl::Status StubProcess::StartReaper() {
  ASSIGN_OR_RETURN(reaper_,
                   StartThread(absl::StrCat("the reaper of stub process ",
                                            pid_),
                               [this] { Reap(); }));
  return absl::OkStatus();
}

StubProcess::~StubProcess() {
  {
    absl::MutexLock l(&platform_->live_mu_);
    auto& live = platform_->live_;
    live.erase(std::find(live.begin(), live.end(), this));
  }
  kill(pid_, SIGKILL);
  if (reaper_.joinable()) {
    reaper_.join();
  } else {
    Reap();  // its reaper could not be started: reap it here
  }
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
  // the host allocate their pages of the shared area (18 MiB for all)
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

bool StubProcess::WaitForContext(ThreadSlot* s, uint64_t spin_cycles,
                                 const std::atomic<bool>& interrupted,
                                 int64_t unmatched_pos) {
  uint32_t* owner = &s->owner;
  if (spin_cycles != 0) {
    const uint64_t start = __rdtsc();
    while (LoadAcquire(owner) != kOwnerSentry) {
      if (__rdtsc() - start > spin_cycles) break;
      _mm_pause();
    }
  }
  if (LoadAcquire(owner) == kOwnerSentry) return !dead();
  StoreSeqCst(&s->sentry_sleeping, 1);
  int unanswered = 0;  // waits that timed out with an interrupt pending
  for (;;) {
    uint32_t v = LoadSeqCst(owner);
    if (v == kOwnerSentry) break;
    if (v != kOwnerStub && !corrupt_.exchange(true)) kill(pid_, SIGKILL);
    // Timed, so that an interrupt the worker does not take is noticed
    // without anything to wake us (Interrupt does not).
    timespec ts{0, unmatched_pos >= 0 ? kStarvedRetryNs : kInterruptRetryNs};
    if (syscall(SYS_futex, owner, FUTEX_WAIT, v, &ts, nullptr, 0) == 0 ||
        errno != ETIMEDOUT || dead()) {
      continue;
    }
    if (unmatched_pos >= 0) {
      // No worker was made for our entry. Once `head` is past it a worker
      // took it (head is the stub's: a wrong value only costs a preempt).
      const uint32_t head = LoadAcquire(&shared_->ring.head);
      if (static_cast<int32_t>(head - static_cast<uint32_t>(unmatched_pos)) > 0) {
        unmatched_pos = -1;
      } else {
        PreemptOne(static_cast<int>(s - shared_->slots));
      }
    }
    // While no worker has our entry, the one that takes it sees the flag.
    if (!interrupted.load(std::memory_order_seq_cst) || unmatched_pos >= 0) {
      continue;
    }
    // The worker has not trapped since the interrupt: send it again (a
    // thread that blocked SIGUSR2 keeps it pending); past the bound it
    // blocks its host signals (a forged sigreturn) and never traps: end
    // the process, as a host SIGKILL of the sandbox would.
    if (++unanswered >= kInterruptRetries) {
      KillCorrupt("one of its workers did not take an interrupt for 2 s "
                  "(its host signals blocked by the application?)");
      continue;
    }
    const pid_t tid = __atomic_load_n(&s->running_tid, __ATOMIC_SEQ_CST);
    if (tid > 0) syscall(SYS_tgkill, pid_, tid, kInterruptSignal);
  }
  StoreSeqCst(&s->sentry_sleeping, 0);
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
  if (AddWorker(/*matched=*/false) != AddResult::kMade) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "systrap: the host refused stub ", pid_, " its first worker"));
  }
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
  // A host that refused a worker since the last one was made may refuse
  // the one this context will need: make it now, idle, so that the
  // refusal is the clone's EAGAIN and not a context nobody can run.
  if (worker_refused_.load(std::memory_order_acquire) &&
      workers_.load(std::memory_order_acquire) <
          static_cast<uint32_t>(contexts_.load(std::memory_order_acquire)) + 1) {
    if (AddWorker(/*matched=*/false) == AddResult::kRefused) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "systrap: the host refused stub ", pid_,
          " a worker for a new thread"));
    }
  }
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

StubProcess::AddResult StubProcess::AddWorker(bool matched) {
  absl::MutexLock l(&add_mu_);
  const uint32_t n = workers_.load(std::memory_order_acquire);
  if (n >= kMaxThreads - 1) return AddResult::kAtBound;
  const uint32_t index = n + 1;
  workers_.store(index, std::memory_order_release);
  StubWorker* w = &shared_->workers[index];
  w->self = WorkerInStub(index);
  w->stack_top = kStubStacks + (index + 1) * kStackSize - 64;
  w->ctx = 0;
  w->ctx_index = 0;
  w->patch_state = kPatchIdle;
  w->sleeping = 0;
  __atomic_store_n(&w->matched, matched ? 1u : 0u, __ATOMIC_RELEASE);
  __atomic_store_n(&shared_->ring.workers, index, __ATOMIC_RELAXED);
  int64_t r;
  if (int t = refuse_for_testing_.load(); t > 0) {
    refuse_for_testing_.store(t - 1);
    r = -EAGAIN;
  } else {
    r = Control(kOpClone, index);
  }
  if (r < 0) {
    // Host limits (threads, pids, memory): the index is free again, and
    // the caller decides (README.md, "A worker the host refuses").
    workers_.store(n, std::memory_order_release);
    __atomic_store_n(&shared_->ring.workers, n, __ATOMIC_RELAXED);
    if (!dead()) {
      worker_refused_.store(true, std::memory_order_release);
      workers_refused_.fetch_add(1, std::memory_order_relaxed);
      platform_->fastpath().mutable_counters().workers_refused.fetch_add(
          1, std::memory_order_relaxed);
    }
    return AddResult::kRefused;
  }
  worker_refused_.store(false, std::memory_order_release);
  return AddResult::kMade;
}

void StubProcess::PreemptOne(int except) {
  absl::MutexLock l(&slots_mu_);
  const uint32_t start = preempt_cursor_.fetch_add(1, std::memory_order_relaxed);
  for (uint32_t k = 0; k < kMaxThreads; k++) {
    const uint32_t i = 1 + (start + k) % (kMaxThreads - 1);
    if (static_cast<int>(i) == except || !used_slots_.test(i)) continue;
    ThreadSlot* s = &shared_->slots[i];
    if (LoadAcquire(&s->owner) != kOwnerStub) continue;
    const pid_t tid = __atomic_load_n(&s->running_tid, __ATOMIC_SEQ_CST);
    if (tid <= 0) continue;
    // As Interrupt() does: the worker hands it back as an interrupt, its
    // Sentry thread queues it again, behind the entry that waits.
    StoreSeqCst(&s->interrupt, 1);
    syscall(SYS_tgkill, pid_, tid, kInterruptSignal);
    preempt_cursor_.store(start + k + 1, std::memory_order_relaxed);
    return;
  }
}

// A worker takes an entry by moving `head` and frees its cell a few
// instructions later (stub.cc, TryTake). A worker the host preempts in
// between holds that cell while the other contexts go round the ring, so
// the producer can come back to it a lap later: more cells than contexts
// does not make that impossible, only rare. The cell is then the previous
// lap's entry, written and already taken (head past it), and is freed as
// soon as that worker runs again: wait for it, boundedly, instead of
// calling the ring corrupt.
bool StubProcess::WaitForLappedCell(ContextRing* ring, RingCell* c,
                                    uint32_t pos) {
  const uint32_t prev = pos - kRingSize;
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  for (int spins = 0;; spins++) {
    const uint32_t seq = LoadAcquire(&c->seq);
    if (seq == pos) return true;
    const uint32_t head = LoadAcquire(&ring->head);
    const bool taken = static_cast<int32_t>(head - prev) > 0 &&
                       static_cast<int32_t>(head - pos) <= 0;
    if (seq != prev + 1 || !taken || dead()) return false;
    if (spins < 64) {
      _mm_pause();
    } else {
      if (absl::Now() > deadline) return false;
      sched_yield();
    }
  }
}

bool StubProcess::Submit(int slot, int64_t* unmatched_pos) {
  if (unmatched_pos != nullptr) *unmatched_pos = -1;
  AttachMaps(slot);
  const uint32_t generation = generation_[slot].load(std::memory_order_relaxed);
  ContextRing* ring = &shared_->ring;
  uint32_t pos;
  {
    absl::MutexLock l(&ring_mu_);
    pos = tail_;
    RingCell* c = &ring->cells[pos & (kRingSize - 1)];
    // Free for this lap, or still held by the worker that took the
    // previous lap's entry (WaitForLappedCell); anything else is memory
    // the application overwrote.
    if (LoadAcquire(&c->seq) != pos && !WaitForLappedCell(ring, c, pos)) {
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
  // Entries that no worker was matched to were taken by workers that
  // counted themselves idle: those counts are not idle workers.
  for (uint32_t owed = owed_idle_.load(std::memory_order_acquire); owed > 0;) {
    if (!owed_idle_.compare_exchange_weak(owed, owed - 1)) continue;
    uint32_t w = LoadSeqCst(&ring->waiting);
    bool paid = false;
    while (w > 0 && !paid) {
      paid = __atomic_compare_exchange_n(&ring->waiting, &w, w - 1, false,
                                         __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    if (!paid) {
      owed_idle_.fetch_add(1, std::memory_order_acq_rel);
      break;
    }
    owed = owed_idle_.load(std::memory_order_acquire);
  }
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
  switch (AddWorker(/*matched=*/true)) {
    case AddResult::kMade:
      break;
    case AddResult::kAtBound:
      // As many workers as contexts: one of them will be free.
      if (LoadSeqCst(&ring->sleepers) != 0) Futex(&ring->futex, FUTEX_WAKE, 1);
      break;
    case AddResult::kRefused:
      // The host gives no thread: the entry waits for the next worker that
      // hands a context back (the ring is FIFO), which counts itself idle
      // first: one count owed. A sleeper that looked before we published
      // would miss it.
      owed_idle_.fetch_add(1, std::memory_order_acq_rel);
      if (LoadSeqCst(&ring->sleepers) != 0) Futex(&ring->futex, FUTEX_WAKE, 1);
      if (unmatched_pos != nullptr) *unmatched_pos = pos;
      break;
  }
  return true;
}

}  // namespace sandboxd::systrap
