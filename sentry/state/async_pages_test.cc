// Restores whose pages load in the background (mm/async_loader.h), end to
// end through MmState and an image on disk: an MM's copies and faults on a
// range that is still loading wait for that range only (with the MM's lock
// for reading: the other threads' copies and faults go on) or, with
// RestoreWait::kExclusive, stop the whole address space; a failed read is
// EIO / SIGBUS, never zeros; memory is mapped only once loaded;
// pages.img is read with O_DIRECT where it can be, buffered otherwise; and
// the full-load throughput from a file in the page cache.
#include <signal.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "sentry/kernel/testing/fakes.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"
#include "sentry/mm/testing/read_gate.h"
#include "sentry/state/mm_state.h"
#include "sentry/state/pages.h"

namespace sandboxd::state {
namespace {

constexpr uint64_t kPage = mm::kPageSize;
constexpr uintptr_t kMin = kernel::testing::kMinUserAddr;
constexpr uintptr_t kMax = kernel::testing::kMaxUserAddr;
constexpr uintptr_t kA = 0x10000000;
constexpr uintptr_t kB = 0x20000000;
constexpr uint64_t kLen = 64 * kPage;

// An AddressSpace that checks that nothing is mapped before it is loaded.
class CheckingAddressSpace : public platform::AddressSpace {
 public:
  explicit CheckingAddressSpace(mm::MemoryFile* mf) : mf_(mf) {}
  absl::Status MapFile(uintptr_t addr, int, off_t off, size_t len,
                       platform::Prot) override {
    uint64_t s, e;
    if (mf_->async_loader() != nullptr &&
        mf_->async_loader()->FirstUnloaded(off, len, &s, &e)) {
      ADD_FAILURE() << "mapped 0x" << std::hex << addr
                    << " before its pages were loaded";
    }
    maps_++;
    return absl::OkStatus();
  }
  void Unmap(uintptr_t, size_t) override {}
  std::atomic<int> maps_{0};

 private:
  mm::MemoryFile* const mf_;
};

// A PageReader over another whose reads pass a gate first
// (mm/testing/read_gate.h: held back, or failed, by saved offset).
class GatedReader : public PageReader, public mm::testing::ReadGate {
 public:
  explicit GatedReader(std::unique_ptr<PageReader> inner)
      : inner_(std::move(inner)) {}
  absl::Status LoadPages(uint64_t off, uint64_t len, uint8_t* dst) override {
    return LoadPagesZeroed(off, len, dst);
  }
  absl::Status LoadPagesZeroed(uint64_t off, uint64_t len,
                               uint8_t* dst) override {
    if (absl::Status s = Pass(off, len); !s.ok()) return s;
    return inner_->LoadPagesZeroed(off, len, dst);
  }
  std::string Name() const override { return inner_->Name(); }

 private:
  const std::unique_ptr<PageReader> inner_;
};

std::string TempDir() {
  // Under the build's working directory's filesystem (not tmpfs) so that
  // O_DIRECT is offered.
  char tmpl[] = "/tmp/sbx_async_pages_XXXXXX";
  char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d == nullptr ? "" : d;
}

// Never zero: every page is stored in pages.img.
uint8_t Byte(uintptr_t addr) {
  return static_cast<uint8_t>(1 + addr / kPage % 251);
}

class AsyncPagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    src_ = std::move(mm::MemoryFile::Create(1ull << 30)).value();
    dst_ = std::move(mm::MemoryFile::Create(1ull << 30)).value();
    // One process: two anonymous areas, every page its own byte.
    auto m = std::make_shared<mm::MM>(
        src_.get(), std::make_unique<kernel::testing::FakeAddressSpace>(),
        kMin, kMax);
    for (uintptr_t base : {kA, kB}) {
      ASSERT_EQ(m->Mmap(base, kLen, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
                static_cast<int64_t>(base));
      for (uintptr_t p = base; p < base + kLen; p += kPage) {
        std::vector<uint8_t> page(kPage, Byte(p));
        ASSERT_EQ(m->CopyOut(p, page.data(), kPage),
                  static_cast<int64_t>(kPage));
      }
    }
    auto w = FilePageWriter::Create(dir_, src_->Internal(0));
    ASSERT_TRUE(w.ok()) << w.status();
    Saver s(&state_, w->get());
    MmState saver;
    auto id = s.Save<mm::MM, pb::Mm>(
        m.get(), s.state().mutable_mms(),
        [&](pb::Mm* r) { return saver.SaveMm(s, *m, r); });
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE((*w)->Finish().ok());
    // Where each area's pages were saved (the reader's offsets).
    for (const pb::Pma& p : state_.mms(0).pmas()) {
      if (p.start() <= kA && kA < p.end()) saved_a_ = p.memfile_offset();
      if (p.start() <= kB && kB < p.end()) saved_b_ = p.memfile_offset();
    }
  }
  void TearDown() override {
    mm_.reset();
    dst_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Restores the MM into dst_ with pages loading in the background.
  void Restore(mm::RestoreWait wait) {
    auto r = FilePageReader::Open(dir_);
    ASSERT_TRUE(r.ok()) << r.status();
    auto gated = std::make_shared<GatedReader>(std::move(r).value());
    gated_ = gated.get();
    mm::AsyncLoadOptions o;
    o.threads = 2;
    // Reads of 16 pages: holding one page back holds one read only.
    o.chunk_bytes = 16 * kPage;
    o.wait_chunk_bytes = 16 * kPage;
    o.wait = wait;
    loader_ = InstallAsyncLoader(dst_.get(), gated, o);
    Loader l(&state_, gated.get(), dst_.get());
    MmState loading;
    auto as = std::make_unique<CheckingAddressSpace>(dst_.get());
    as_ = as.get();
    auto m = loading.LoadMmInto(l, state_.mms(0), dst_.get(), std::move(as),
                                kMin, kMax, nullptr);
    ASSERT_TRUE(m.ok()) << m.status();
    mm_ = std::move(m).value();
    EXPECT_FALSE(loader_->settled());
    EXPECT_EQ(loader_->Stats().bytes_loaded, 0u);  // registered, not read
  }

  bool Holds(uintptr_t addr, uint64_t len) {
    std::vector<uint8_t> buf(len);
    if (mm_->CopyIn(addr, buf.data(), len) != static_cast<int64_t>(len)) {
      return false;
    }
    for (uint64_t o = 0; o < len; o++) {
      if (buf[o] != Byte(addr + o)) return false;
    }
    return true;
  }

  std::string dir_;
  std::unique_ptr<mm::MemoryFile> src_, dst_;
  pb::State state_;
  uint64_t saved_a_ = ~0ull, saved_b_ = ~0ull;
  GatedReader* gated_ = nullptr;
  mm::AsyncLoader* loader_ = nullptr;
  CheckingAddressSpace* as_ = nullptr;
  std::shared_ptr<mm::MM> mm_;
};

TEST_F(AsyncPagesTest, CopiesAndFaultsOfOtherRangesGoOnWhileOneWaits) {
  ASSERT_NE(saved_a_, ~0ull);
  Restore(mm::RestoreWait::kShared);
  gated_->Hold(saved_a_ + 5 * kPage, saved_a_ + 6 * kPage);
  ASSERT_TRUE(loader_->Start().ok());
  std::atomic<bool> a_done{false};
  std::thread waiter([&] {
    // A read(2) buffer in the held area: CopyOut waits for its range.
    std::vector<uint8_t> buf(kPage, 0xAB);
    EXPECT_EQ(mm_->CopyOut(kA + 5 * kPage + 100, buf.data(), 16), 16);
    a_done = true;
  });
  while (loader_->Stats().waiting < 1 || !gated_->Holding()) {
    std::this_thread::yield();
  }
  // Meanwhile, with the waiter holding the MM's lock for reading, another
  // thread copies from, copies to and faults on the other area.
  EXPECT_TRUE(Holds(kB + 3 * kPage, 2 * kPage));
  const char hello[] = "hello";
  EXPECT_EQ(mm_->CopyOut(kB + 9 * kPage, hello, sizeof(hello)),
            static_cast<int64_t>(sizeof(hello)));
  int signo, code;
  EXPECT_TRUE(mm_->HandleFault(kB + 40 * kPage, /*write=*/true, false,
                               &signo, &code));
  // And a fault that needs the writer lock (a new page) too.
  ASSERT_EQ(mm_->Mmap(0x30000000, kPage, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            0x30000000);
  EXPECT_TRUE(mm_->HandleFault(0x30000000, true, false, &signo, &code));
  EXPECT_FALSE(a_done.load());
  gated_->Release();
  waiter.join();
  EXPECT_TRUE(a_done.load());
  std::vector<uint8_t> got(16);
  ASSERT_EQ(mm_->CopyIn(kA + 5 * kPage + 100, got.data(), 16), 16);
  EXPECT_EQ(got, std::vector<uint8_t>(16, 0xAB));
  // The rest of the page and area is the saved data.
  EXPECT_TRUE(Holds(kA, 5 * kPage + 100));
  EXPECT_TRUE(Holds(kA + 6 * kPage, kLen - 6 * kPage));
  ASSERT_TRUE(loader_->WaitAll().ok());
  EXPECT_GE(loader_->Stats().waits, 1u);
  EXPECT_GT(as_->maps_.load(), 0);
}

TEST_F(AsyncPagesTest, ExclusiveWaitsStopTheOtherThreads) {
  Restore(mm::RestoreWait::kExclusive);
  gated_->Hold(saved_a_ + 5 * kPage, saved_a_ + 6 * kPage);
  ASSERT_TRUE(loader_->Start().ok());
  std::thread waiter([&] {
    int signo, code;
    EXPECT_TRUE(
        mm_->HandleFault(kA + 5 * kPage, false, false, &signo, &code));
  });
  while (loader_->Stats().waiting < 1 || !gated_->Holding()) {
    std::this_thread::yield();
  }
  // The waiter holds the writer lock: a fault on loaded memory waits too.
  std::atomic<bool> b_done{false};
  std::thread other([&] {
    int signo, code;
    EXPECT_TRUE(mm_->HandleFault(kB, false, false, &signo, &code));
    b_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(b_done.load());
  gated_->Release();
  waiter.join();
  other.join();
  EXPECT_TRUE(b_done.load());
  EXPECT_TRUE(Holds(kA, kLen));
}

TEST_F(AsyncPagesTest, FailedReadsAreEioAndSigbusNeverZeros) {
  Restore(mm::RestoreWait::kShared);
  gated_->fail_start_ = saved_a_;
  gated_->fail_end_ = saved_a_ + kLen;
  ASSERT_TRUE(loader_->Start().ok());
  EXPECT_FALSE(loader_->WaitAll().ok());
  char buf[16];
  EXPECT_EQ(mm_->CopyIn(kA + kPage, buf, sizeof(buf)), -EIO);
  EXPECT_EQ(mm_->CopyOut(kA + kPage, buf, sizeof(buf)), -EIO);
  int signo, code;
  EXPECT_FALSE(mm_->HandleFault(kA + 2 * kPage, false, false, &signo, &code));
  EXPECT_EQ(signo, SIGBUS);
  EXPECT_EQ(code, BUS_ADRERR);
  // The other area loaded.
  EXPECT_TRUE(Holds(kB, kLen));
  EXPECT_NE(loader_->error().message().find("pages.img"), std::string::npos)
      << loader_->error();
}

TEST_F(AsyncPagesTest, EagerLoadStaysAvailable) {
  auto r = FilePageReader::Open(dir_);
  ASSERT_TRUE(r.ok());
  Loader l(&state_, r->get(), dst_.get());
  MmState loading;
  auto m = loading.LoadMmInto(l, state_.mms(0), dst_.get(),
                              std::make_unique<CheckingAddressSpace>(dst_.get()),
                              kMin, kMax, nullptr);
  ASSERT_TRUE(m.ok()) << m.status();
  mm_ = std::move(m).value();
  EXPECT_EQ(dst_->async_loader(), nullptr);
  EXPECT_TRUE(Holds(kA, kLen));
  EXPECT_TRUE(Holds(kB, kLen));
}

// pages.img: copied from the page cache where it holds the pages, else
// with O_DIRECT on a filesystem that offers it; buffered with
// `direct = false` or when O_DIRECT refuses a read.
TEST_F(AsyncPagesTest, DirectReadsAndFallback) {
  void* p = nullptr;
  ASSERT_EQ(posix_memalign(&p, kPage, 3 * kPage), 0);
  std::unique_ptr<uint8_t, decltype(&free)> buf(static_cast<uint8_t*>(p),
                                                &free);
  {
    // Just written: in the page cache.
    auto r = FilePageReader::Open(dir_, /*direct=*/true);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE((*r)->LoadPages(saved_a_, 2 * kPage, buf.get()).ok());
    EXPECT_EQ(buf.get()[0], Byte(kA));
    EXPECT_EQ(buf.get()[2 * kPage - 1], Byte(kA + kPage));
    if ((*r)->direct()) EXPECT_EQ((*r)->cached_bytes(), 2 * kPage);
  }
  {
    // Dropped from the cache (the file is synced): O_DIRECT.
    UniqueFd fd(open((dir_ + "/pages.img").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
    auto r = FilePageReader::Open(dir_, /*direct=*/true);
    ASSERT_TRUE(r.ok());
    FilePageReader& fr = **r;
    ASSERT_TRUE(fr.LoadPages(saved_b_, 2 * kPage, buf.get()).ok());
    EXPECT_EQ(buf.get()[0], Byte(kB));
    if (fr.direct()) {
      EXPECT_EQ(fr.direct_bytes(), 2 * kPage);
      EXPECT_EQ(fr.cached_bytes(), 0u);
      // Memory O_DIRECT may refuse (EINVAL): the read goes on buffered.
      ASSERT_TRUE(fr.LoadPages(saved_b_ + 4 * kPage, kPage, buf.get() + 1)
                      .ok());
      EXPECT_EQ(buf.get()[1], Byte(kB + 4 * kPage));
      if (!fr.direct()) EXPECT_EQ(fr.buffered_bytes(), kPage);
    } else {
      fprintf(stderr, "note: %s offers no O_DIRECT\n", dir_.c_str());
      EXPECT_EQ(fr.buffered_bytes(), 2 * kPage);
    }
  }
  auto b = FilePageReader::Open(dir_, /*direct=*/false);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->LoadPages(saved_b_, kPage, buf.get()).ok());
  EXPECT_EQ(buf.get()[0], Byte(kB));
  EXPECT_EQ((*b)->direct_bytes() + (*b)->cached_bytes(), 0u);
  EXPECT_EQ((*b)->buffered_bytes(), kPage);
}

// Full load of a 256 MiB image that is in the page cache (just written):
// the figure, printed; the target is >= 1 GB/s.
TEST(AsyncPagesThroughput, FullLoadFromThePageCache) {
  constexpr uint64_t kBytes = 256ull << 20;
  const std::string dir = TempDir();
  auto src = std::move(mm::MemoryFile::Create(1ull << 30)).value();
  auto off = src->Allocate(kBytes);
  ASSERT_TRUE(off.ok());
  for (uint64_t o = 0; o < kBytes; o += kPage) {
    memset(src->Internal(*off + o), static_cast<int>(1 + o / kPage % 200),
           kPage);
  }
  {
    auto w = FilePageWriter::Create(dir, src->Internal(0));
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->SavePages(*off, kBytes).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  src.reset();
  for (int mode = 0; mode < 3; mode++) {
    // buffered; O_DIRECT offered but the cache holds it; O_DIRECT, cold.
    const bool direct = mode != 0;
    if (mode == 2) {
      UniqueFd fd(open((dir + "/pages.img").c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_TRUE(fd.valid());
      ASSERT_EQ(posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
    }
    auto dst = std::move(mm::MemoryFile::Create(1ull << 30)).value();
    // Populated, as a warm Sentry's memory file is (README, "Populated
    // memory file"): the figure is the read, not the host's page
    // allocation.
    ASSERT_TRUE(dst->Populate(kBytes).ok());
    auto r = FilePageReader::Open(dir, direct);
    ASSERT_TRUE(r.ok());
    FilePageReader* fr = r->get();
    std::shared_ptr<PageReader> reader = std::move(r).value();
    mm::AsyncLoadOptions o;
    o.threads = 2;
    mm::AsyncLoader* l = InstallAsyncLoader(dst.get(), reader, o);
    auto to = dst->Allocate(kBytes);
    ASSERT_TRUE(to.ok());
    ASSERT_TRUE(FillPages(*reader, dst.get(), *off, kBytes, *to).ok());
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(l->Start().ok());
    ASSERT_TRUE(l->WaitAll().ok());
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - t0)
                         .count();
    const double gbs = kBytes / s / 1e9;
    fprintf(stderr,
            "full load of %llu MiB, %s: %.3f s, %.2f GB/s (%llu reads, "
            "cached %llu MiB, direct %llu MiB, buffered %llu MiB)\n",
            static_cast<unsigned long long>(kBytes >> 20),
            mode == 0 ? "buffered" : mode == 1 ? "page cache" : "cold O_DIRECT",
            s, gbs, static_cast<unsigned long long>(l->Stats().reads),
            static_cast<unsigned long long>(fr->cached_bytes() >> 20),
            static_cast<unsigned long long>(fr->direct_bytes() >> 20),
            static_cast<unsigned long long>(fr->buffered_bytes() >> 20));
    EXPECT_EQ(l->Stats().bytes_loaded, kBytes);
    EXPECT_EQ(dst->Internal(*to + kPage)[0], 2);
    EXPECT_EQ(dst->Internal(*to + kBytes - kPage)[kPage - 1],
              static_cast<uint8_t>(1 + (kBytes / kPage - 1) % 200));
    // Loose: a loaded 2-core machine. The figure above is the result.
    EXPECT_GT(gbs, 0.1);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sandboxd::state
