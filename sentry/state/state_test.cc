// The checkpoint framework: ids and sharing, the image framing (version,
// checksum, truncation) and both page stores.
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sentry/state/crc32c.h"
#include "sentry/state/image.h"
#include "sentry/state/loader.h"
#include "sentry/state/pages.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {
namespace {

constexpr uint64_t kPage = kStatePageSize;

TEST(Crc32cTest, KnownVectors) {
  // The check value of CRC-32C (RFC 3720, B.4).
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32c(0, "", 0), 0u);
  // Incremental equals one-shot.
  EXPECT_EQ(Crc32c(Crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

struct Thing {
  int value;
};

TEST(SaverTest, SharedObjectsAreWrittenOnce) {
  pb::State st;
  MemoryPages pages(nullptr);
  Saver s(&st, &pages);
  Thing a{1}, b{2};
  int fills = 0;
  auto save = [&](const Thing* t) {
    return s.Save<Thing, pb::Pipe>(t, st.mutable_pipes(), [&](pb::Pipe* r) {
      fills++;
      r->set_capacity(t->value);
      return absl::OkStatus();
    });
  };
  EXPECT_EQ(*save(&a), 1u);
  EXPECT_EQ(*save(&b), 2u);
  EXPECT_EQ(*save(&a), 1u);
  EXPECT_EQ(*save(nullptr), 0u);
  EXPECT_EQ(fills, 2);
  ASSERT_EQ(st.pipes_size(), 2);
  EXPECT_EQ(st.pipes(0).capacity(), 1u);
  EXPECT_EQ(st.pipes(1).capacity(), 2u);
  // The same address in another table is another object.
  auto other = s.Save<Thing, pb::File>(&a, st.mutable_files(),
                                       [](pb::File*) { return absl::OkStatus(); });
  EXPECT_EQ(*other, 1u);
  EXPECT_EQ(st.files_size(), 1);
}

TEST(SaverTest, IdIsAssignedBeforeTheRecordIsFilled) {
  pb::State st;
  MemoryPages pages(nullptr);
  Saver s(&st, &pages);
  Thing a{1};
  // An object that refers to itself gets its own id back, not a loop.
  absl::StatusOr<uint64_t> inner;
  auto outer = s.Save<Thing, pb::Pipe>(&a, st.mutable_pipes(), [&](pb::Pipe*) {
    inner = s.Save<Thing, pb::Pipe>(&a, st.mutable_pipes(), [](pb::Pipe*) {
      ADD_FAILURE() << "filled twice";
      return absl::OkStatus();
    });
    return absl::OkStatus();
  });
  EXPECT_EQ(*outer, 1u);
  EXPECT_EQ(*inner, 1u);
}

TEST(SaverTest, FillErrorsFailTheSave) {
  pb::State st;
  MemoryPages pages(nullptr);
  Saver s(&st, &pages);
  Thing a{1};
  auto r = s.Save<Thing, pb::Pipe>(&a, st.mutable_pipes(), [](pb::Pipe*) {
    return absl::UnimplementedError("save: Thing cannot be saved yet");
  });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(LoaderTest, SharingIsRestored) {
  pb::State st;
  st.add_pipes()->set_capacity(10);
  st.add_pipes()->set_capacity(20);
  Loader l(&st, nullptr, nullptr);
  int builds = 0;
  auto load = [&](uint64_t id) {
    return l.Load<Thing, pb::Pipe>(
        id, st.pipes(), "thing",
        [&](const pb::Pipe& r) -> absl::StatusOr<std::shared_ptr<Thing>> {
          builds++;
          return std::make_shared<Thing>(Thing{static_cast<int>(r.capacity())});
        });
  };
  auto a1 = load(1), a2 = load(1), b = load(2);
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(a1->get(), a2->get());
  EXPECT_NE(a1->get(), b->get());
  EXPECT_EQ((*a1)->value, 10);
  EXPECT_EQ((*b)->value, 20);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(*load(0), nullptr);
  auto bad = load(3);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("thing 3"), std::string::npos)
      << bad.status();
}

TEST(LoaderTest, CyclesAndBuildErrorsAreErrors) {
  pb::State st;
  st.add_pipes();
  Loader l(&st, nullptr, nullptr);
  std::function<absl::StatusOr<std::shared_ptr<Thing>>(uint64_t)> load =
      [&](uint64_t id) {
        return l.Load<Thing, pb::Pipe>(
            id, st.pipes(), "thing",
            [&](const pb::Pipe&) -> absl::StatusOr<std::shared_ptr<Thing>> {
              auto self = load(1);  // needs itself
              if (!self.ok()) return self.status();
              return std::make_shared<Thing>();
            });
      };
  auto r = load(1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("needs itself"), std::string::npos)
      << r.status();
}

pb::State SampleState() {
  pb::State st;
  st.add_pipes()->set_data("hello");
  st.mutable_vfs()->set_next_mount_id(7);
  return st;
}

TEST(ImageTest, RoundTrip) {
  auto data = EncodeState(SampleState());
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->substr(0, 8), "SBXSTATE");
  auto st = DecodeState(*data);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pipes(0).data(), "hello");
  EXPECT_EQ(st->vfs().next_mount_id(), 7u);
}

TEST(ImageTest, VersionMismatch) {
  std::string data = *EncodeState(SampleState());
  uint32_t v = kFormatVersion + 1;
  memcpy(&data[8], &v, 4);
  auto st = DecodeState(data);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.status().message().find("format version 2"), std::string::npos)
      << st.status();
}

TEST(ImageTest, BadChecksum) {
  std::string data = *EncodeState(SampleState());
  data[data.size() - 3] ^= 0x40;
  auto st = DecodeState(data);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.status().message().find("checksum"), std::string::npos)
      << st.status();
}

TEST(ImageTest, BadMagicAndTruncation) {
  std::string data = *EncodeState(SampleState());
  std::string wrong = data;
  wrong[0] = 'X';
  EXPECT_EQ(DecodeState(wrong).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Every truncation is refused with an error, none crashes.
  for (size_t n = 0; n < data.size(); n++) {
    auto st = DecodeState(absl::string_view(data).substr(0, n));
    EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss) << n;
  }
  // A page index is not a state file.
  EXPECT_EQ(DecodeState(Frame(kPageIndexMagic, "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/state_test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ImageTest, Files) {
  TempDir dir;
  ASSERT_TRUE(WriteStateFile(dir.path(), SampleState()).ok());
  auto st = ReadStateFile(dir.path());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pipes(0).data(), "hello");
  // A truncated state.pb on disk.
  const std::string path = dir.path() + "/state.pb";
  ASSERT_EQ(truncate(path.c_str(), 30), 0);
  auto bad = ReadStateFile(dir.path());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(path), std::string::npos)
      << bad.status();
  EXPECT_EQ(ReadStateFile(dir.path() + "/nonexistent").status().code(),
            absl::StatusCode::kNotFound);
}

// A fake memory file: 8 pages, some zero.
std::vector<uint8_t> Memory() {
  std::vector<uint8_t> m(8 * kPage, 0);
  for (uint64_t p : {1, 2, 5, 7}) memset(&m[p * kPage], 'a' + p, kPage);
  m[6 * kPage + 100] = 9;  // mostly zero is not zero
  return m;
}

void CheckLoaded(PageReader& r, const std::vector<uint8_t>& mem) {
  // Saved ranges: [0, 3) pages and [5, 8).
  std::vector<uint8_t> buf(3 * kPage, 0xff);
  ASSERT_TRUE(r.LoadPages(0, 3 * kPage, buf.data()).ok());
  EXPECT_EQ(memcmp(buf.data(), mem.data(), 3 * kPage), 0);
  ASSERT_TRUE(r.LoadPages(5 * kPage, 3 * kPage, buf.data()).ok());
  EXPECT_EQ(memcmp(buf.data(), &mem[5 * kPage], 3 * kPage), 0);
  // Part of a saved range.
  ASSERT_TRUE(r.LoadPages(6 * kPage, kPage, buf.data()).ok());
  EXPECT_EQ(buf[100], 9);
  // Page 3 was never saved: an error, not zeros.
  EXPECT_EQ(r.LoadPages(3 * kPage, kPage, buf.data()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(r.LoadPages(100, kPage, buf.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PagesTest, MemoryPages) {
  auto mem = Memory();
  MemoryPages p(mem.data());
  ASSERT_TRUE(p.SavePages(0, 3 * kPage).ok());
  ASSERT_TRUE(p.SavePages(5 * kPage, 3 * kPage).ok());
  EXPECT_EQ(p.stored_pages(), 5u);  // 1, 2, 5, 6, 7; not 0
  CheckLoaded(p, mem);
}

TEST(PagesTest, Files) {
  TempDir dir;
  auto mem = Memory();
  {
    auto w = FilePageWriter::Create(dir.path(), mem.data());
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->SavePages(0, 3 * kPage).ok());
    ASSERT_TRUE((*w)->SavePages(5 * kPage, 3 * kPage).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  // Only non-zero pages are stored, whole pages.
  struct stat st;
  ASSERT_EQ(stat((dir.path() + "/pages.img").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(5 * kPage));
  auto r = FilePageReader::Open(dir.path());
  ASSERT_TRUE(r.ok()) << r.status();
  CheckLoaded(**r, mem);

  // pages.img shorter than the index says: refused at open.
  ASSERT_EQ(truncate((dir.path() + "/pages.img").c_str(), 2 * kPage), 0);
  auto short_img = FilePageReader::Open(dir.path());
  EXPECT_EQ(short_img.status().code(), absl::StatusCode::kDataLoss)
      << short_img.status();
  // A damaged index.
  const std::string idx = dir.path() + "/pages.idx";
  std::string data = *ReadWholeFile(idx);
  data[kHeaderSize + 1] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(idx, data).ok());
  auto bad = FilePageReader::Open(dir.path());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
}

}  // namespace
}  // namespace sandboxd::state
