// A whole image directory (image_dir.h): a saved kernel's image checks
// clean, and each of its files truncated, with a byte flipped, or removed
// is an error that names that file; a foreign build, platform or a memory
// limit below the image's is an error naming the manifest's field.
#include "sentry/state/image_dir.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/kernel/testing/fakes.h"
#include "sentry/state/image.h"
#include "sentry/state/pages.h"
#include "base/unique_fd.h"

namespace sandboxd::state {
namespace {

std::string TmpDir() {
  const char* t = getenv("TEST_TMPDIR");
  std::string tmpl =
      std::string(t != nullptr ? t : "/tmp") + "/image_dir_test.XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

void Sh(const std::string& cmd) { ASSERT_EQ(system(cmd.c_str()), 0) << cmd; }

class ImageDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    k_ = std::make_unique<kernel::Kernel>(
        std::move(mf).value(),
        std::make_unique<kernel::testing::FakePlatform>(), &nosys_,
        kernel::KernelOptions{});
    fs::TmpFsOptions o;
    o.dev = 7;
    o.root_mode = 0755;
    tmpfs_ = std::make_unique<fs::TmpFs>(&k_->memory_file(), o);
    vfs_ = std::make_shared<fs::Vfs>(tmpfs_->Root(), "tmpfs", "root", false);
    k_->set_vfs(vfs_);
    auto mm = std::make_shared<mm::MM>(
        &k_->memory_file(),
        std::make_unique<kernel::testing::FakeAddressSpace>(),
        kernel::testing::kMinUserAddr, kernel::testing::kMaxUserAddr);
    // Two pages of memory, one of them written: pages.img holds one page.
    int64_t a = mm->Mmap(0, 0x2000, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS);
    ASSERT_GT(a, 0);
    const char hi[] = "hello";
    ASSERT_EQ(mm->CopyOut(a, hi, sizeof(hi)),
              static_cast<int64_t>(sizeof(hi)));
    auto init = k_->CreateInit(
        mm, std::make_shared<fs::FdTable>(64),
        std::make_shared<fs::FsContext>(vfs_->Root(), vfs_->Root()),
        platform::CpuState{});
    ASSERT_TRUE(init.ok()) << init.status();
    root_ = TmpDir();
    image_ = root_ + "/img";
    SaveOptions so;
    so.platform = "fake";
    auto r = SaveImage(image_, *k_, *vfs_, nullptr, so);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->pages, 1u);
    EXPECT_EQ(r->pages_bytes, 4096u);
  }
  void TearDown() override { Sh("rm -rf " + root_); }

  CheckOptions Opts() {
    CheckOptions o;
    o.platform = "fake";
    return o;
  }

  kernel::testing::NoSyscalls nosys_;
  std::unique_ptr<kernel::Kernel> k_;
  std::unique_ptr<fs::TmpFs> tmpfs_;
  std::shared_ptr<fs::Vfs> vfs_;
  std::string root_, image_;
};

TEST_F(ImageDirTest, ASavedImageChecksCleanAndIsComplete) {
  auto m = CheckImage(image_, Opts());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->platform(), "fake");
  EXPECT_EQ(m->build_id(), SentryBuildId());
  EXPECT_NE(m->build_id(), "none");  // the build links with --build-id
  EXPECT_EQ(m->files_size(), 3);
  EXPECT_GT(m->memory_bytes(), 0u);
  // No temporary directory is left beside it.
  Sh("test $(ls " + root_ + " | wc -l) -eq 1");
  // pages.img holds whole pages only.
  struct stat sb;
  ASSERT_EQ(stat((image_ + "/pages.img").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_size % 4096, 0);
  // Saved again over itself: replaced whole.
  SaveOptions so;
  so.platform = "fake";
  ASSERT_TRUE(SaveImage(image_, *k_, *vfs_, nullptr, so).ok());
  EXPECT_TRUE(CheckImage(image_, Opts()).ok());
}

// What a warm Sentry does with the daemon's descriptor: the same image,
// written and read only relative to it (an O_PATH descriptor, as the
// daemon sends), into a directory that holds no image yet.
TEST_F(ImageDirTest, IntoADirectoryDescriptor) {
  const std::string dir = root_ + "/by-fd";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  UniqueFd fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  SaveOptions so;
  so.platform = "fake";
  so.spec = "recorded";
  auto r = SaveImageInto(fd.get(), "the-image", *k_, *vfs_, nullptr, so);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pages, 1u);
  // Only the image's files: no temporary left.
  Sh("test \"$(ls " + dir + " | tr '\\n' ' ')\" = "
     "'manifest.pb pages.idx pages.img state.pb '");
  auto m = CheckImage(ImageDir(fd.get(), "the-image"), Opts());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->spec(), "recorded");
  EXPECT_TRUE(CheckImage(dir, Opts()).ok());  // and by path
  EXPECT_TRUE(ReadStateFile(ImageDir(fd.get(), "the-image")).ok());
  EXPECT_TRUE(FilePageReader::Open(ImageDir(fd.get(), "the-image")).ok());
  // A second save into it is refused: an image is never overwritten
  // piecemeal.
  auto again = SaveImageInto(fd.get(), "the-image", *k_, *vfs_, nullptr, so);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("the-image"), std::string::npos);
  // Errors name the directory by the name it was given.
  Sh("rm " + dir + "/pages.idx");
  auto missing = CheckImage(ImageDir(fd.get(), "the-image"), Opts());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("the-image/pages.idx"),
            std::string::npos)
      << missing.status();
}

TEST_F(ImageDirTest, EveryFileDamagedInTurnIsNamed) {
  for (const std::string file :
       {"manifest.pb", "state.pb", "pages.idx", "pages.img"}) {
    for (const std::string how : {"truncate", "flip", "remove"}) {
      const std::string copy = root_ + "/copy";
      Sh("rm -rf " + copy + " && cp -r " + image_ + " " + copy);
      const std::string path = copy + "/" + file;
      if (how == "truncate") {
        Sh("truncate -s -1 " + path);
      } else if (how == "flip") {
        // A byte in the middle of the file, inverted.
        int fd = open(path.c_str(), O_RDWR);
        ASSERT_GE(fd, 0);
        off_t mid = lseek(fd, 0, SEEK_END) / 2;
        unsigned char c;
        ASSERT_EQ(pread(fd, &c, 1, mid), 1);
        c = ~c;
        ASSERT_EQ(pwrite(fd, &c, 1, mid), 1);
        close(fd);
      } else {
        Sh("rm " + path);
      }
      auto m = CheckImage(copy, Opts());
      EXPECT_FALSE(m.ok()) << file << " " << how;
      EXPECT_NE(m.status().message().find(file), absl::string_view::npos)
          << file << " " << how << ": " << m.status();
    }
  }
}

// The manifest's fields, rewritten one at a time (framed correctly, so
// that only the field is wrong).
TEST_F(ImageDirTest, ForeignBuildVersionPlatformAndMemoryAreNamed) {
  const std::string mpath = image_ + "/manifest.pb";
  auto data = ReadWholeFile(mpath);
  ASSERT_TRUE(data.ok());
  auto payload = Unframe(kManifestMagic, *data, "manifest.pb");
  ASSERT_TRUE(payload.ok());
  pb::Manifest good;
  ASSERT_TRUE(good.ParseFromString(*payload));
  auto check_with = [&](const std::function<void(pb::Manifest&)>& edit,
                        const CheckOptions& opts, const std::string& field) {
    pb::Manifest m = good;
    edit(m);
    ASSERT_TRUE(
        WriteFileAtomically(mpath, Frame(kManifestMagic,
                                          m.SerializeAsString())).ok());
    auto r = CheckImage(image_, opts);
    EXPECT_FALSE(r.ok()) << field;
    EXPECT_NE(r.status().message().find(field), absl::string_view::npos)
        << r.status();
  };
  check_with([](pb::Manifest& m) { m.set_build_id("0123abcd"); }, Opts(),
             "build_id");
  check_with([](pb::Manifest& m) { m.set_format_version(99); }, Opts(),
             "format_version");
  CheckOptions kvm = Opts();
  kvm.platform = "kvm";
  check_with([](pb::Manifest&) {}, kvm, "platform");
  CheckOptions small = Opts();
  small.memory_limit = 1;
  check_with([](pb::Manifest&) {}, small, "memory_bytes");
  {
    // An image of another boot (its host's CLOCK_MONOTONIC ahead of this
    // one's) is taken: the sandbox's clocks go on from State.kernel's
    // values wherever it loads.
    pb::Manifest m = good;
    m.set_monotonic_ns(INT64_MAX);
    ASSERT_TRUE(WriteFileAtomically(
                    mpath, Frame(kManifestMagic, m.SerializeAsString()))
                    .ok());
    EXPECT_TRUE(CheckImage(image_, Opts()).ok());
  }
  // A state.pb header is checked as well when an older manifest is right
  // about its size and checksum: a foreign file is no image at all.
  ASSERT_TRUE(WriteFileAtomically(mpath, "not a manifest at all......").ok());
  auto r = CheckImage(image_, Opts());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("manifest.pb"), absl::string_view::npos);
}

}  // namespace
}  // namespace sandboxd::state
