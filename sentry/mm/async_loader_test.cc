// AsyncLoader against a fake source that can hold back, slow down or fail
// chosen reads: the queue order (awaited ranges first, large waits split),
// waits for one range that do not wait for others, sticky errors,
// cancellation, the rate limit and the counters.
#include "sentry/mm/async_loader.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/testing/read_gate.h"

namespace sandboxd::mm {
namespace {

constexpr uint64_t kPage = kPageSize;

uint8_t Pattern(uint64_t src_off) {
  return static_cast<uint8_t>(1 + (src_off / kPage) % 251);
}

// Saved data: every page of the source holds Pattern(its offset); the
// gate holds back, slows down or fails chosen reads (testing/read_gate.h).
class FakeSource : public PageSource, public testing::ReadGate {
 public:
  absl::Status ReadPages(uint64_t src_off, uint64_t len,
                         uint8_t* dst) override {
    if (absl::Status s = Pass(src_off, len); !s.ok()) return s;
    for (uint64_t o = 0; o < len; o += kPage) {
      memset(dst + o, Pattern(src_off + o), kPage);
    }
    return absl::OkStatus();
  }
  std::string Name() const override { return "fake pages.img"; }
};

class AsyncLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    source_ = std::make_shared<FakeSource>();
  }

  // Allocates `pages` pages, registered with source offset = file offset
  // + kSrcBias (so that the pattern tells a wrong source apart).
  uint64_t AddRange(AsyncLoader* l, uint64_t pages) {
    auto off = mf_->Allocate(pages * kPage);
    EXPECT_TRUE(off.ok());
    EXPECT_TRUE(l->Add(*off, pages * kPage, *off + kSrcBias).ok());
    return *off;
  }
  bool Holds(uint64_t off, uint64_t len) {
    for (uint64_t o = 0; o < len; o += kPage) {
      const uint8_t want = Pattern(off + o + kSrcBias);
      const uint8_t* p = mf_->Internal(off + o);
      if (p[0] != want || p[kPage - 1] != want) return false;
    }
    return true;
  }
  AsyncLoader* Install(AsyncLoadOptions o) {
    mf_->SetAsyncLoader(std::make_unique<AsyncLoader>(mf_.get(), source_, o));
    return mf_->async_loader();
  }

  static constexpr uint64_t kSrcBias = 1ull << 40;
  std::unique_ptr<MemoryFile> mf_;
  std::shared_ptr<FakeSource> source_;
};

TEST(RestoreWaitTest, Parses) {
  EXPECT_EQ(*ParseRestoreWait("shared"), RestoreWait::kShared);
  EXPECT_EQ(*ParseRestoreWait("exclusive"), RestoreWait::kExclusive);
  EXPECT_FALSE(ParseRestoreWait("both").ok());
  EXPECT_STREQ(RestoreWaitName(RestoreWait::kExclusive), "exclusive");
}

TEST_F(AsyncLoaderTest, LoadsEverythingInLargeCoalescedReads) {
  AsyncLoadOptions o;
  o.threads = 2;
  o.chunk_bytes = 1 << 20;
  AsyncLoader* l = Install(o);
  // 3 ranges allocated back to back: contiguous in both the file and the
  // source, so they coalesce into 1 MiB reads.
  const uint64_t a = AddRange(l, 100);
  AddRange(l, 200);
  AddRange(l, 212);
  EXPECT_FALSE(l->settled());
  ASSERT_TRUE(l->Start().ok());
  ASSERT_TRUE(l->WaitAll().ok());
  EXPECT_TRUE(l->settled());
  EXPECT_TRUE(Holds(a, 512 * kPage));
  const AsyncLoadStats st = l->Stats();
  EXPECT_EQ(st.bytes_total, 512 * kPage);
  EXPECT_EQ(st.bytes_loaded, 512 * kPage);
  EXPECT_EQ(st.pages_loaded, 512u);
  EXPECT_EQ(st.reads, 2u);  // 2 MiB in 1 MiB chunks
  EXPECT_TRUE(st.done);
  EXPECT_GT(st.load_ns, 0u);
  EXPECT_EQ(st.waits, 0u);
  // Registering after Start is refused.
  EXPECT_FALSE(l->Add(a, kPage, 0).ok());
}

TEST_F(AsyncLoaderTest, WaitMovesTheRangeToTheFront) {
  AsyncLoadOptions o;
  o.threads = 1;
  o.chunk_bytes = 4 * kPage;
  AsyncLoader* l = Install(o);
  const uint64_t first = AddRange(l, 64);  // 16 background reads
  source_->delay_us_ = 2000;
  ASSERT_TRUE(l->Start().ok());
  const uint64_t last = first + 60 * kPage;
  ASSERT_EQ(l->Wait(last, kPage), 0);
  EXPECT_TRUE(Holds(last, kPage));
  // At most the read under way and one more came before ours.
  const std::vector<uint64_t> log = source_->Log();
  bool found = false;
  for (size_t i = 0; i < log.size() && i < 3; i++) {
    found |= log[i] <= last + kSrcBias && last + kSrcBias < log[i] + 4 * kPage;
  }
  EXPECT_TRUE(found) << "the awaited page was read after " << log.size()
                     << " reads";
  EXPECT_LT(log.size(), 8u);
  const AsyncLoadStats st = l->Stats();
  EXPECT_EQ(st.waits, 1u);
  uint64_t hist = 0;
  for (uint64_t b : st.wait_hist) hist += b;
  EXPECT_EQ(hist, 1u);
  EXPECT_GT(st.wait_ns_total, 0u);
  ASSERT_TRUE(l->WaitAll().ok());
  EXPECT_TRUE(Holds(first, 64 * kPage));
}

TEST_F(AsyncLoaderTest, LargeWaitsAreSplitSoSmallOnesGoFirst) {
  AsyncLoadOptions o;
  o.threads = 1;
  o.chunk_bytes = 64 * kPage;
  o.wait_chunk_bytes = 4 * kPage;
  AsyncLoader* l = Install(o);
  const uint64_t big = AddRange(l, 256);   // 64 awaited pieces
  const uint64_t small = AddRange(l, 64);  // coalesced with big: one range
  source_->delay_us_ = 1000;
  // Hold the first read so that both waits are queued before anything.
  source_->Hold(0, UINT64_MAX);
  ASSERT_TRUE(l->Start().ok());
  std::thread big_waiter([&] { EXPECT_EQ(l->Wait(big, 256 * kPage), 0); });
  while (l->Stats().waiting < 1) std::this_thread::yield();
  std::thread small_waiter(
      [&] { EXPECT_EQ(l->Wait(small + 32 * kPage, kPage), 0); });
  while (l->Stats().waiting < 2) std::this_thread::yield();
  source_->Release();
  small_waiter.join();
  // The small wait did not wait for the 256 pages of the big one.
  const AsyncLoadStats mid = l->Stats();
  EXPECT_LT(mid.bytes_loaded, 256 * kPage) << "small waited for big";
  big_waiter.join();
  EXPECT_TRUE(Holds(big, 256 * kPage));
  EXPECT_TRUE(Holds(small + 32 * kPage, kPage));
  // The big wait went in pieces of at most wait_chunk_bytes.
  EXPECT_GE(l->Stats().reads, 40u);
  ASSERT_TRUE(l->WaitAll().ok());
}

TEST_F(AsyncLoaderTest, AWaiterDoesNotHoldUpOthers) {
  AsyncLoadOptions o;
  o.threads = 2;
  o.chunk_bytes = 16 * kPage;
  o.wait_chunk_bytes = 16 * kPage;
  AsyncLoader* l = Install(o);
  const uint64_t a = AddRange(l, 16);
  auto gap = mf_->Allocate(kPage);  // keeps a and b apart
  ASSERT_TRUE(gap.ok());
  const uint64_t b = AddRange(l, 16);
  source_->Hold(a + kSrcBias, a + kSrcBias + 16 * kPage);
  ASSERT_TRUE(l->Start().ok());
  std::atomic<bool> a_done{false};
  std::thread t([&] {
    EXPECT_EQ(l->Wait(a, kPage), 0);
    a_done = true;
  });
  while (!source_->Holding()) std::this_thread::yield();
  // a's read is stuck; b loads and its waiter returns meanwhile (a wait
  // for one page of b returns once that page is in: the rest of b may
  // still be on its way, so the wait is for all of b).
  EXPECT_EQ(l->Wait(b, 16 * kPage), 0);
  EXPECT_TRUE(Holds(b, 16 * kPage));
  EXPECT_FALSE(a_done.load());
  source_->Release();
  t.join();
  EXPECT_TRUE(a_done.load());
  EXPECT_TRUE(Holds(a, 16 * kPage));
}

TEST_F(AsyncLoaderTest, ReadErrorsAreSticky) {
  AsyncLoadOptions o;
  o.threads = 1;
  o.chunk_bytes = 4 * kPage;
  AsyncLoader* l = Install(o);
  const uint64_t a = AddRange(l, 16);
  source_->fail_start_ = a + kSrcBias + 4 * kPage;
  source_->fail_end_ = a + kSrcBias + 5 * kPage;
  ASSERT_TRUE(l->Start().ok());
  absl::Status st = l->WaitAll();
  // The background read of pages 4-7 failed: all four stay failed.
  EXPECT_EQ(l->Wait(a + 4 * kPage, kPage), -EIO);
  EXPECT_EQ(l->Wait(a + 4 * kPage, kPage), -EIO);  // sticky
  EXPECT_EQ(l->Wait(a + 5 * kPage, kPage), -EIO);  // same read
  EXPECT_EQ(l->Wait(a, 2 * kPage), 0);
  EXPECT_EQ(l->Wait(a + 3 * kPage, 2 * kPage), -EIO);  // in part
  EXPECT_EQ(l->Wait(a + 8 * kPage, 8 * kPage), 0);
  EXPECT_TRUE(Holds(a, 4 * kPage));
  EXPECT_TRUE(Holds(a + 8 * kPage, 8 * kPage));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fake pages.img"), std::string::npos) << st;
  EXPECT_NE(st.message().find("injected"), std::string::npos) << st;
  EXPECT_FALSE(l->settled());  // failed ranges keep the slow path
  EXPECT_EQ(mf_->WaitLoaded(a + 4 * kPage, kPage), -EIO);
  uint64_t s, e;
  ASSERT_TRUE(l->FirstUnloaded(a, 16 * kPage, &s, &e));
  EXPECT_EQ(s, a + 4 * kPage);
  EXPECT_EQ(e, a + 8 * kPage);
  EXPECT_EQ(l->Stats().bytes_failed, 4 * kPage);
  // Freeing the failed pages forgets them: reuse reads zeros.
  mf_->Free(a + 4 * kPage, 4 * kPage);
  EXPECT_TRUE(l->settled());
}

TEST_F(AsyncLoaderTest, WaitAllOrErrorEndsAtTheFirstError) {
  AsyncLoadOptions o;
  o.threads = 2;
  o.chunk_bytes = 4 * kPage;
  AsyncLoader* l = Install(o);
  const uint64_t a = AddRange(l, 16);
  // Pages 12-15 are held back; pages 0-3 fail.
  source_->fail_start_ = a + kSrcBias;
  source_->fail_end_ = a + kSrcBias + kPage;
  source_->Hold(a + kSrcBias + 12 * kPage, a + kSrcBias + 16 * kPage);
  ASSERT_TRUE(l->Start().ok());
  absl::Status st = l->WaitAllOrError();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("injected"), std::string::npos) << st;
  EXPECT_FALSE(l->Stats().done);  // the held read is still to come
  source_->Release();
  EXPECT_EQ(l->WaitAll().message(), st.message());
  EXPECT_TRUE(Holds(a + 12 * kPage, 4 * kPage));
}

TEST_F(AsyncLoaderTest, WaitAllOrErrorWithoutErrorWaitsForAll) {
  AsyncLoadOptions o;
  o.threads = 1;
  o.chunk_bytes = 4 * kPage;
  AsyncLoader* l = Install(o);
  const uint64_t a = AddRange(l, 16);
  source_->Hold(a + kSrcBias + 12 * kPage, a + kSrcBias + 16 * kPage);
  ASSERT_TRUE(l->Start().ok());
  std::atomic<bool> returned{false};
  std::thread t([&] {
    EXPECT_TRUE(l->WaitAllOrError().ok());
    returned = true;
  });
  while (!source_->Holding()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());  // not before the last page
  source_->Release();
  t.join();
  EXPECT_TRUE(returned.load());
  EXPECT_TRUE(l->Stats().done);
  EXPECT_TRUE(Holds(a, 16 * kPage));
}

TEST_F(AsyncLoaderTest, CancelledRangesAreNeverWritten) {
  AsyncLoadOptions o;
  o.threads = 1;
  AsyncLoader* l = Install(o);
  const uint64_t a = AddRange(l, 32);
  mf_->Free(a + 8 * kPage, 8 * kPage);
  auto again = mf_->Allocate(8 * kPage);  // the freed range, reused
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, a + 8 * kPage);
  ASSERT_TRUE(l->Start().ok());
  ASSERT_TRUE(l->WaitAll().ok());
  EXPECT_TRUE(Holds(a, 8 * kPage));
  EXPECT_TRUE(Holds(a + 16 * kPage, 16 * kPage));
  for (uint64_t i = 0; i < 8 * kPage; i++) {
    ASSERT_EQ(mf_->Internal(*again)[i], 0) << i;
  }
  EXPECT_EQ(l->Stats().bytes_cancelled, 8 * kPage);
  EXPECT_EQ(l->Stats().bytes_loaded, 24 * kPage);
}

TEST_F(AsyncLoaderTest, WaitBeforeStartReadsInline) {
  AsyncLoadOptions o;
  AsyncLoader* l = Install(o);
  const uint64_t a = AddRange(l, 8);
  EXPECT_EQ(mf_->WaitLoaded(a + kPage, kPage), 0);
  EXPECT_TRUE(Holds(a + kPage, kPage));
  EXPECT_FALSE(Holds(a, kPage));  // the rest waits for Start
  ASSERT_TRUE(l->Start().ok());
  ASSERT_TRUE(l->WaitAll().ok());
  EXPECT_TRUE(Holds(a, 8 * kPage));
}

TEST_F(AsyncLoaderTest, RateLimitPacesTheReads) {
  AsyncLoadOptions o;
  o.threads = 2;
  o.rate_limit = 40ull << 20;  // 40 MiB/s: 8 MiB in ~200 ms
  AsyncLoader* l = Install(o);
  AddRange(l, 2048);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(l->Start().ok());
  ASSERT_TRUE(l->WaitAll().ok());
  const double s = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  EXPECT_GE(s, 0.18);
  EXPECT_LT(s, 2.0);
  // Chunks are ~10 ms of the limit each.
  EXPECT_GE(l->Stats().reads, 16u);
  const AsyncLoadStats st = l->Stats();
  EXPECT_GE(st.load_ns, 180000000u);
}

}  // namespace
}  // namespace sandboxd::mm
