#include "sentry/mm/async_loader.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/thread.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::mm {

absl::StatusOr<RestoreWait> ParseRestoreWait(absl::string_view name) {
  if (name == "shared") return RestoreWait::kShared;
  if (name == "exclusive") return RestoreWait::kExclusive;
  return absl::InvalidArgumentError(absl::StrCat(
      "restore wait \"", name, "\": expected \"shared\" or \"exclusive\""));
}

const char* RestoreWaitName(RestoreWait wait) {
  return wait == RestoreWait::kShared ? "shared" : "exclusive";
}

AsyncLoader::AsyncLoader(MemoryFile* mf, std::shared_ptr<PageSource> source,
                         AsyncLoadOptions options)
    : mf_(mf), source_(std::move(source)), options_([&] {
        AsyncLoadOptions o = options;
        o.threads = std::max(1, o.threads);
        o.wait_chunk_bytes = std::max(PageRoundUp(o.wait_chunk_bytes),
                                      kPageSize);
        o.chunk_bytes = std::max(PageRoundUp(o.chunk_bytes), kPageSize);
        if (o.rate_limit != 0) {
          // ~10 ms of the limit per background read.
          o.chunk_bytes = std::max(
              kPageSize, std::min(o.chunk_bytes,
                                  PageRoundDown(o.rate_limit / 100)));
        }
        return o;
      }()) {}

AsyncLoader::~AsyncLoader() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    work_cv_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

uint64_t AsyncLoader::NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

absl::Status AsyncLoader::Add(uint64_t dst_off, uint64_t len,
                              uint64_t src_off) {
  if (len == 0) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  if (started_) {
    return absl::FailedPreconditionError(
        "memory-file pages registered after the loader started");
  }
  stats_.bytes_total += len;
  // Coalesce with the range before when both the memory file and the
  // image continue it: one read instead of two.
  auto it = pending_.lower_bound(dst_off);
  if (it != pending_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end == dst_off &&
        prev->second.src_off + (dst_off - prev->first) == src_off) {
      prev->second.end = dst_off + len;
      settled_.store(false, std::memory_order_release);
      return absl::OkStatus();
    }
  }
  pending_.emplace_hint(it, dst_off, Range{dst_off + len, src_off});
  settled_.store(false, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status AsyncLoader::Start() {
  {
    absl::MutexLock l(&mu_);
    if (started_) return absl::OkStatus();
    started_ = true;
    stats_.started = true;
    start_ns_ = NowNs();
    UpdateSettledLocked();
  }
  // A host that refuses some reading threads leaves fewer of them; one
  // that refuses all leaves only the waiters' reads (none happen without a
  // reader), so that is an error for the restore.
  absl::Status first_error;
  for (int i = 0; i < options_.threads; i++) {
    absl::StatusOr<std::thread> t =
        StartThread("a page-loading thread", [this] { Run(); });
    if (!t.ok()) {
      if (first_error.ok()) first_error = t.status();
      continue;
    }
    threads_.push_back(*std::move(t));
  }
  if (threads_.empty() && options_.threads > 0) return first_error;
  return absl::OkStatus();
}

AsyncLoader::RangeMap::const_iterator AsyncLoader::FirstAfter(
    const RangeMap& m, uint64_t off) {
  auto it = m.upper_bound(off);
  if (it != m.begin() && std::prev(it)->second.end > off) --it;
  return it;
}

AsyncLoader::RangeMap::iterator AsyncLoader::FirstAfter(RangeMap& m,
                                                        uint64_t off) {
  auto it = m.upper_bound(off);
  if (it != m.begin() && std::prev(it)->second.end > off) --it;
  return it;
}

bool AsyncLoader::Meets(const RangeMap& m, uint64_t start, uint64_t end,
                        uint64_t* s, uint64_t* e) {
  auto it = FirstAfter(m, start);
  if (it == m.end() || it->first >= end) return false;
  *s = std::max(start, it->first);
  *e = std::min(end, it->second.end);
  return true;
}

uint64_t AsyncLoader::Erase(RangeMap& m, uint64_t start, uint64_t end) {
  uint64_t removed = 0;
  auto it = FirstAfter(m, start);
  while (it != m.end() && it->first < end) {
    const uint64_t s = it->first;
    const Range r = it->second;
    it = m.erase(it);
    if (s < start) m.emplace(s, Range{start, r.src_off});
    if (r.end > end) {
      it = m.emplace(end, Range{r.end, r.src_off + (end - s)}).first;
    }
    removed += std::min(end, r.end) - std::max(start, s);
  }
  return removed;
}

AsyncLoader::Chunk AsyncLoader::TakeLocked(RangeMap::iterator it,
                                           uint64_t start, uint64_t end) {
  Chunk c{start, end, it->second.src_off + (start - it->first)};
  Erase(pending_, start, end);
  in_flight_.emplace(start, Range{end, c.src_off});
  return c;
}

bool AsyncLoader::ClaimLocked(Chunk* c) {
  while (!urgent_.empty()) {
    auto [us, ue] = urgent_.front();
    urgent_.pop_front();
    auto it = FirstAfter(pending_, us);
    if (it == pending_.end() || it->first >= ue) continue;  // served
    const uint64_t s = std::max(us, it->first);
    const uint64_t e = std::min({ue, it->second.end,
                                 s + options_.wait_chunk_bytes});
    *c = TakeLocked(it, s, e);
    // What is left waits its turn behind the other awaited ranges.
    if (e < ue) urgent_.emplace_back(e, ue);
    return true;
  }
  if (pending_.empty()) return false;
  auto it = FirstAfter(pending_, cursor_);
  if (it == pending_.end()) it = pending_.begin();
  const uint64_t s = std::max(cursor_, it->first) < it->second.end
                         ? std::max(cursor_, it->first)
                         : it->first;
  const uint64_t e = std::min(it->second.end, s + options_.chunk_bytes);
  *c = TakeLocked(it, s, e);
  cursor_ = e;
  return true;
}

void AsyncLoader::UpdateSettledLocked() {
  const bool done = pending_.empty() && in_flight_.empty();
  if (done && started_ && !stats_.done) {
    stats_.done = true;
    stats_.load_ns = NowNs() - start_ns_;
  }
  settled_.store(done && failed_.empty(), std::memory_order_release);
}

void AsyncLoader::Throttle(uint64_t len) {
  if (options_.rate_limit == 0) return;
  const uint64_t cost = len * 1000000000ull / options_.rate_limit;
  uint64_t until;
  {
    absl::MutexLock l(&rate_mu_);
    // The bytes arrive at the end of their slot on the modelled disk.
    rate_next_ns_ = std::max(rate_next_ns_, NowNs()) + cost;
    until = rate_next_ns_;
  }
  const uint64_t now = NowNs();
  if (until > now) {
    const uint64_t d = until - now;
    timespec ts{static_cast<time_t>(d / 1000000000ull),
                static_cast<long>(d % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

void AsyncLoader::Run() {
  absl::MutexLock l(&mu_);
  while (true) {
    Chunk c;
    while (!stop_ && !ClaimLocked(&c)) work_cv_.Wait(&mu_);
    if (stop_) return;
    ReadLocked(c);
  }
}

void AsyncLoader::ReadLocked(const Chunk& c) {
  const uint64_t len = c.end - c.start;
  absl::Status st;
  {
    mu_.Unlock();
    Throttle(len);
    st = source_->ReadPages(c.src_off, len, mf_->Internal(c.start));
    mu_.Lock();
  }
  {
    in_flight_.erase(c.start);
    stats_.reads++;
    if (st.ok()) {
      stats_.bytes_loaded += len;
      stats_.pages_loaded += len / kPageSize;
    } else {
      stats_.bytes_failed += len;
      failed_.emplace(c.start, Range{c.end, c.src_off});
      if (error_.ok()) {
        error_ = absl::Status(
            st.code(),
            absl::StrCat("restore: reading ", source_->Name(), " at offset ",
                         c.src_off, " for memory-file pages [", c.start, ", ",
                         c.end, "): ", st.message()));
        // Logged once: later failures say the same to their callers.
        fprintf(stderr,
                "sentry: %s; accesses to pages it left unloaded fail "
                "(EIO, SIGBUS)\n",
                error_.ToString().c_str());
      }
    }
    UpdateSettledLocked();
    done_cv_.SignalAll();
  }
}

int AsyncLoader::Wait(uint64_t off, uint64_t len) {
  if (settled() || len == 0) return 0;
  // Loads are whole pages; a copy's bytes are within some.
  const uint64_t end = PageRoundUp(off + len);
  off = PageRoundDown(off);
  absl::MutexLock l(&mu_);
  uint64_t s, e;
  if (Meets(failed_, off, end, &s, &e)) return -EIO;
  if (!Meets(pending_, off, end, &s, &e) &&
      !Meets(in_flight_, off, end, &s, &e)) {
    return 0;
  }
  if (!started_) {
    // Before Start (the restore itself touching a restored page: syscall
    // patching's sites): read here, in this thread.
    while (Meets(pending_, off, end, &s, &e)) {
      ReadLocked(TakeLocked(FirstAfter(pending_, s), s, e));
    }
    while (Meets(in_flight_, off, end, &s, &e)) done_cv_.Wait(&mu_);
    return Meets(failed_, off, end, &s, &e) ? -EIO : 0;
  }
  const uint64_t t0 = NowNs();
  stats_.waits++;
  stats_.waiting++;
  int result = 0;
  urgent_.emplace_front(off, end);
  work_cv_.Signal();
  while (true) {
    done_cv_.Wait(&mu_);
    if (Meets(failed_, off, end, &s, &e)) {
      result = -EIO;
      break;
    }
    const bool pending = Meets(pending_, off, end, &s, &e);
    if (!pending && !Meets(in_flight_, off, end, &s, &e)) break;
    if (pending && urgent_.empty()) {
      // Our entry was served in part and dropped: ask again.
      urgent_.emplace_front(s, end);
      work_cv_.Signal();
    }
  }
  stats_.waiting--;
  const uint64_t us = (NowNs() - t0) / 1000;
  stats_.wait_ns_total += (NowNs() - t0);
  int b = 0;
  while (b + 1 < AsyncLoadStats::kBuckets && (us >> (b + 1)) != 0) b++;
  stats_.wait_hist[b]++;
  return result;
}

bool AsyncLoader::FirstUnloaded(uint64_t off, uint64_t len, uint64_t* start,
                                uint64_t* end) const {
  if (settled() || len == 0) return false;
  const uint64_t last = PageRoundUp(off + len);
  off = PageRoundDown(off);
  len = last - off;
  absl::MutexLock l(&mu_);
  bool found = false;
  uint64_t best_s = 0, best_e = 0;
  for (const RangeMap* m : {&pending_, &in_flight_, &failed_}) {
    uint64_t s, e;
    if (Meets(*m, off, off + len, &s, &e) && (!found || s < best_s)) {
      found = true;
      best_s = s;
      best_e = e;
    }
  }
  if (found) {
    *start = best_s;
    *end = best_e;
  }
  return found;
}

void AsyncLoader::Cancel(uint64_t off, uint64_t len) {
  if (settled() || len == 0) return;
  const uint64_t end = off + len;
  absl::MutexLock l(&mu_);
  uint64_t s, e;
  while (Meets(in_flight_, off, end, &s, &e)) done_cv_.Wait(&mu_);
  stats_.bytes_cancelled += Erase(pending_, off, end);
  Erase(failed_, off, end);
  UpdateSettledLocked();
  // A waiter on the range (there is none while its owner frees it, but a
  // tmpfs reader may race a truncate) finds it loaded: zeros, as freed.
  done_cv_.SignalAll();
}

absl::Status AsyncLoader::WaitAll() {
  absl::MutexLock l(&mu_);
  while (!pending_.empty() || !in_flight_.empty()) done_cv_.Wait(&mu_);
  return error_;
}

absl::Status AsyncLoader::WaitAllOrError() {
  absl::MutexLock l(&mu_);
  while (error_.ok() && (!pending_.empty() || !in_flight_.empty())) {
    done_cv_.Wait(&mu_);
  }
  return error_;
}

absl::Status AsyncLoader::error() const {
  absl::MutexLock l(&mu_);
  return error_;
}

AsyncLoadStats AsyncLoader::Stats() const {
  absl::MutexLock l(&mu_);
  AsyncLoadStats s = stats_;
  if (started_ && !s.done) s.load_ns = NowNs() - start_ns_;
  return s;
}

}  // namespace sandboxd::mm
