// Round trips of address spaces: build MMs in one memory file, save them,
// load them into another and check that the loaded ones behave as the
// originals would: the same data and layout, copy-on-write between a
// fork'ed pair (and its pages stored once), shared memory still shared,
// file mappings still reaching their file, the vDSO mapped from the
// loading Sentry's own.
#include "sentry/state/mm_state.h"

#include <signal.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "sentry/fs/mappable.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"
#include "sentry/mm/memory_file.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/pages.h"
#include "sentry/vdso/vdso_image.h"
#include "sentry/vdso/vdso_mapping.h"

namespace sandboxd::state {
namespace {

using kernel::testing::FakeAddressSpace;

constexpr uint64_t kPage = mm::kPageSize;
constexpr uintptr_t kMin = kernel::testing::kMinUserAddr;
constexpr uintptr_t kMax = kernel::testing::kMaxUserAddr;
// Far apart: their PMAs never merge, so each copy-on-write break is one page.
constexpr uintptr_t kA = 0x100000;
constexpr uintptr_t kB = 0x200000;
constexpr uintptr_t kS = 0x300000;
constexpr uintptr_t kHeap = 0x400000;

std::unique_ptr<mm::MemoryFile> NewMemoryFile() {
  auto mf = mm::MemoryFile::Create(1ull << 30);
  EXPECT_TRUE(mf.ok()) << mf.status();
  return std::move(mf).value();
}

std::shared_ptr<mm::MM> NewMm(mm::MemoryFile* mf) {
  return std::make_shared<mm::MM>(mf, std::make_unique<FakeAddressSpace>(),
                                  kMin, kMax);
}

void Write(mm::MM& m, uintptr_t addr, const std::string& s) {
  ASSERT_EQ(m.CopyOut(addr, s.data(), s.size() + 1),
            static_cast<int64_t>(s.size() + 1));
}

std::string Read(mm::MM& m, uintptr_t addr) {
  std::string out;
  EXPECT_EQ(m.CopyInString(addr, 256, &out), 0) << std::hex << addr;
  return out;
}

class MmStateTest : public ::testing::Test {
 protected:
  // Saves `mms` as the kernel does (one State.mms record each), with the
  // memory of `mf`.
  absl::Status Save(mm::MemoryFile* mf,
                    const std::vector<std::shared_ptr<mm::MM>>& mms,
                    std::vector<uint64_t>* ids = nullptr) {
    state_.Clear();
    pages_ = std::make_unique<MemoryPages>(mf->Internal(0));
    Saver s(&state_, pages_.get());
    MmState saver;
    for (const auto& m : mms) {
      ASSIGN_OR_RETURN(uint64_t id,
                       (s.Save<mm::MM, pb::Mm>(
                           m.get(), s.state().mutable_mms(), [&](pb::Mm* r) {
                             return saver.SaveMm(s, *m, r);
                           })));
      if (ids != nullptr) ids->push_back(id);
    }
    return absl::OkStatus();
  }

  // Loads every saved MM into `mf`, in table order.
  absl::StatusOr<std::vector<std::shared_ptr<mm::MM>>> Load(
      mm::MemoryFile* mf, const vdso::Vdso* vdso = nullptr) {
    loader_ = std::make_unique<Loader>(&state_, pages_.get(), mf);
    MmState loading;
    std::vector<std::shared_ptr<mm::MM>> out;
    for (int i = 1; i <= state_.mms_size(); i++) {
      ASSIGN_OR_RETURN(
          auto m, (loader_->Load<mm::MM, pb::Mm>(
                      i, state_.mms(), "mm", [&](const pb::Mm& r) {
                        return loading.LoadMmInto(
                            *loader_, r, mf,
                            std::make_unique<FakeAddressSpace>(), kMin, kMax,
                            vdso);
                      })));
      out.push_back(std::move(m));
    }
    return out;
  }

  // A memory file that outlives everything the test loads into it.
  mm::MemoryFile* File() {
    files_.push_back(NewMemoryFile());
    return files_.back().get();
  }

  std::vector<std::unique_ptr<mm::MemoryFile>> files_;  // destroyed last
  pb::State state_;
  std::unique_ptr<MemoryPages> pages_;
  std::unique_ptr<Loader> loader_;
};

TEST_F(MmStateTest, ForkedPairStaysCopyOnWrite) {
  mm::MemoryFile* mf = File();
  auto parent = NewMm(mf);
  ASSERT_EQ(parent->Mmap(kA, kPage, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kA));
  ASSERT_EQ(parent->Mmap(kB, kPage, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kB));
  ASSERT_EQ(parent->Mmap(kS, kPage, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kS));
  parent->SetBrkStart(kHeap);
  ASSERT_EQ(parent->Brk(kHeap + 100), static_cast<int64_t>(kHeap + 100));
  Write(*parent, kA, "A before the fork");
  Write(*parent, kB, "B, untouched since the fork");
  Write(*parent, kS, "shared");
  Write(*parent, kHeap, "heap");

  auto child_or = parent->Fork(std::make_unique<FakeAddressSpace>());
  ASSERT_TRUE(child_or.ok()) << child_or.status();
  std::shared_ptr<mm::MM> child = std::move(child_or).value();
  Write(*parent, kA, "A, the parent's since");
  const std::string layout = parent->DebugString();
  const std::string child_layout = child->DebugString();

  ASSERT_TRUE(Save(mf, {parent, child}).ok());
  // A twice (the parent's copy and the child's original), B and the heap
  // page once each although both own them, the shared page once.
  EXPECT_EQ(pages_->stored_pages(), 5u);
  ASSERT_EQ(state_.memory_size(), 4);  // runs: A's two, B, the heap
  ASSERT_EQ(state_.shared_anons_size(), 1);

  mm::MemoryFile* other = File();
  auto loaded = Load(other);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  mm::MM& p = *(*loaded)[0];
  mm::MM& c = *(*loaded)[1];
  EXPECT_EQ(p.DebugString(), layout);
  EXPECT_EQ(c.DebugString(), child_layout);
  EXPECT_EQ(p.brk(), kHeap + 100);
  EXPECT_EQ(c.brk(), kHeap + 100);
  EXPECT_EQ(p.mmap_base(), parent->mmap_base());
  // Nothing was copied by the load: five pages, two of them (B, heap)
  // shared by both MMs.
  EXPECT_EQ(other->AllocatedBytes(), 5 * kPage);
  EXPECT_EQ(other->SharedBytes(), 2 * kPage);

  EXPECT_EQ(Read(p, kA), "A, the parent's since");
  EXPECT_EQ(Read(c, kA), "A before the fork");
  EXPECT_EQ(Read(p, kB), "B, untouched since the fork");
  EXPECT_EQ(Read(c, kB), "B, untouched since the fork");
  EXPECT_EQ(Read(c, kHeap), "heap");

  // Still copy-on-write: the child's write is its own...
  Write(c, kB, "B, the child's");
  EXPECT_EQ(Read(p, kB), "B, untouched since the fork");
  EXPECT_EQ(Read(c, kB), "B, the child's");
  EXPECT_EQ(other->SharedBytes(), kPage);  // the heap page
  // ... and the parent, now the page's only owner, takes it back.
  Write(p, kB, "B, the parent's");
  EXPECT_EQ(other->AllocatedBytes(), 6 * kPage);
  EXPECT_EQ(Read(c, kB), "B, the child's");

  // Shared memory is one object in both.
  Write(c, kS, "shared, written by the child");
  EXPECT_EQ(Read(p, kS), "shared, written by the child");

  // A fault maps what the PMAs say (the AddressSpace started empty).
  int signo = 0, code = 0;
  EXPECT_TRUE(p.HandleFault(kA, /*write=*/true, false, &signo, &code));
  EXPECT_TRUE(c.HandleFault(kHeap, /*write=*/false, false, &signo, &code));

  // The last owner's exit frees everything.
  loaded->clear();
  loader_.reset();
  EXPECT_EQ(other->AllocatedBytes(), 0u);
}

TEST_F(MmStateTest, PagesOfPartlyCoveredRunsAreSavedOnce) {
  // A 4-page region forked; the child unmaps its middle, so its PMAs cover
  // the parent's one in two pieces.
  mm::MemoryFile* mf = File();
  auto parent = NewMm(mf);
  ASSERT_EQ(parent->Mmap(kA, 4 * kPage, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kA));
  for (int i = 0; i < 4; i++) {
    Write(*parent, kA + i * kPage, "page " + std::to_string(i));
  }
  auto child_or = parent->Fork(std::make_unique<FakeAddressSpace>());
  ASSERT_TRUE(child_or.ok());
  std::shared_ptr<mm::MM> child = std::move(child_or).value();
  ASSERT_EQ(child->Munmap(kA + kPage, 2 * kPage), 0);
  ASSERT_EQ(mf->AllocatedBytes(), 4 * kPage);
  ASSERT_EQ(mf->SharedBytes(), 2 * kPage);

  // The child's pieces first: the parent's range is then saved in part.
  ASSERT_TRUE(Save(mf, {child, parent}).ok());
  EXPECT_EQ(pages_->stored_pages(), 4u);
  EXPECT_EQ(state_.memory_size(), 3);

  mm::MemoryFile* other = File();
  auto loaded = Load(other);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  mm::MM& c = *(*loaded)[0];
  mm::MM& p = *(*loaded)[1];
  EXPECT_EQ(other->AllocatedBytes(), 4 * kPage);
  EXPECT_EQ(other->SharedBytes(), 2 * kPage);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(Read(p, kA + i * kPage), "page " + std::to_string(i));
  }
  EXPECT_EQ(Read(c, kA + 3 * kPage), "page 3");
  Write(p, kA + 3 * kPage, "the parent's page 3");
  Write(c, kA, "the child's page 0");
  EXPECT_EQ(Read(c, kA + 3 * kPage), "page 3");
  EXPECT_EQ(Read(p, kA), "page 0");
  EXPECT_EQ(other->SharedBytes(), 0u);
}

// A writable shared mapping and a private one of a tmpfs file with seals
// (F_SEAL_FUTURE_WRITE added after the writable mapping was made).
TEST_F(MmStateTest, FileMappingsReachTheLoadedFile) {
  mm::MemoryFile* mf = File();
  fs::TmpFs tmp(mf, fs::TmpFsOptions{});
  fs::CreateRequest req;
  req.type = S_IFREG;
  req.mode = 0644;
  std::shared_ptr<fs::Inode> inode;
  ASSERT_EQ(tmp.Root()->Create("data", req, &inode), 0);
  auto file = std::static_pointer_cast<fs::TmpFsRegularFile>(inode);
  file->set_initial_seals(0);  // as memfd_create(MFD_ALLOW_SEALING)
  const std::string contents(2 * kPage, 'f');
  ASSERT_EQ(file->Write(contents.data(), contents.size(), 0),
            static_cast<int64_t>(contents.size()));

  auto m = NewMm(mf);
  auto shared = std::make_shared<fs::InodeMappable>(inode, "/data");
  platform::Prot max{true, true, true};
  ASSERT_EQ(shared->BeginShared(true, &max.write), 0);
  ASSERT_EQ(m->MmapFile(kA, 2 * kPage, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, shared, 0, max),
            static_cast<int64_t>(kA));
  auto priv = std::make_shared<fs::InodeMappable>(inode, "/data");
  ASSERT_EQ(m->MmapFile(kB, kPage, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_FIXED, priv, kPage,
                        platform::Prot{true, true, true}),
            static_cast<int64_t>(kB));
  Write(*m, kA, "through the shared mapping");
  Write(*m, kB, "private copy");
  EXPECT_EQ(file->AddSeals(fs::kSealWrite), -EBUSY);
  // F_SEAL_FUTURE_WRITE leaves the existing writable mapping working; the
  // load takes it as it is.
  ASSERT_EQ(file->AddSeals(fs::kSealFutureWrite), 0);
  const std::string layout = m->DebugString();

  ASSERT_TRUE(Save(mf, {m}).ok());
  ASSERT_EQ(state_.mappables_size(), 2);
  ASSERT_EQ(state_.mappables(0).file().inode(), state_.mappables(1).file().inode());

  mm::MemoryFile* other = File();
  auto loaded = Load(other);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  mm::MM& l = *(*loaded)[0];
  EXPECT_EQ(l.DebugString(), layout);
  auto loaded_inode = FsState::LoadInode(*loader_, state_.mappables(0).file().inode());
  ASSERT_TRUE(loaded_inode.ok());
  auto lf_ptr = std::static_pointer_cast<fs::TmpFsRegularFile>(*loaded_inode);
  fs::TmpFsRegularFile& lf = *lf_ptr;

  EXPECT_EQ(Read(l, kA), "through the shared mapping");
  EXPECT_EQ(Read(l, kB), "private copy");
  // The shared mapping writes the loaded file; the private one does not.
  Write(l, kA + kPage, "second page, after the load");
  char buf[64] = {};
  ASSERT_GT(lf.Read(buf, sizeof(buf) - 1, kPage), 0);
  EXPECT_STREQ(buf, "second page, after the load");
  ASSERT_GT(lf.Read(buf, sizeof(buf) - 1, 0), 0);
  EXPECT_EQ(std::string(buf, 26), "through the shared mapping");
  // The writable mapping is counted on the loaded file again.
  EXPECT_EQ(lf.AddSeals(fs::kSealWrite), -EBUSY);
  loaded->clear();
  loader_.reset();
  EXPECT_EQ(lf.AddSeals(fs::kSealWrite), 0);
}

TEST_F(MmStateTest, VdsoIsTheLoadingSentrys) {
  mm::MemoryFile* mf = File();
  auto v = vdso::Vdso::Create(mf, vdso::Vdso::Options{false});
  ASSERT_TRUE(v.ok()) << v.status();
  auto m = NewMm(mf);
  auto text = (*v)->Map(*m);
  ASSERT_TRUE(text.ok()) << text.status();
  char head[4];
  ASSERT_EQ(m->CopyIn(*text, head, sizeof(head)), 4);  // a private copy
  ASSERT_TRUE(Save(mf, {m}).ok());

  mm::MemoryFile* other = File();
  // Without a vDSO in the loading Sentry: an error, not a process whose
  // clock calls jump into nothing.
  auto none = Load(other);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition)
      << none.status();
  auto v2 = vdso::Vdso::Create(other, vdso::Vdso::Options{false});
  ASSERT_TRUE(v2.ok());
  auto loaded = Load(other, v2->get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<mm::VmaInfo> vmas = (*loaded)[0]->Vmas();
  ASSERT_EQ(vmas.size(), 2u);
  EXPECT_EQ(vmas[0].mappable, (*v2)->MappableOf(vdso::Vdso::Part::kVvar));
  EXPECT_EQ(vmas[1].mappable, (*v2)->MappableOf(vdso::Vdso::Part::kImage));
  EXPECT_EQ(vmas[1].start, *text);
  std::vector<uint8_t> image(vdso::kVdsoImageSize);
  ASSERT_EQ((*loaded)[0]->CopyIn(*text, image.data(), image.size()),
            static_cast<int64_t>(image.size()));
  EXPECT_EQ(std::memcmp(image.data(), vdso::kVdsoImage, image.size()), 0);
  loaded->clear();
  loader_.reset();
}

class PatternFile : public mm::Mappable {
 public:
  uint64_t Size() override { return kPage; }
  int64_t ReadAt(void* dst, uint64_t n, uint64_t) override {
    memset(dst, 'p', n);
    return static_cast<int64_t>(n);
  }
  std::string Name() override { return "pattern"; }
};

TEST_F(MmStateTest, UnknownSourcesAndBadImagesFail) {
  mm::MemoryFile* mf = File();
  auto m = NewMm(mf);
  ASSERT_EQ(m->MmapFile(kA, kPage, PROT_READ, MAP_PRIVATE | MAP_FIXED,
                        std::make_shared<PatternFile>(), 0,
                        platform::Prot{true, true, true}),
            static_cast<int64_t>(kA));
  absl::Status s = Save(mf, {m});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("pattern"), std::string::npos) << s;

  auto good = NewMm(mf);
  ASSERT_EQ(good->Mmap(kA, kPage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kA));
  Write(*good, kA, "x");
  ASSERT_TRUE(Save(mf, {good}).ok());
  const pb::State saved = state_;
  mm::MemoryFile* other = File();

  state_.mutable_mms(0)->mutable_pmas(0)->set_memfile_offset(1ull << 20);
  EXPECT_EQ(Load(other).status().code(),
            absl::StatusCode::kInvalidArgument);
  state_ = saved;
  state_.mutable_mms(0)->mutable_vmas(0)->set_end(kMax + kPage);
  EXPECT_EQ(Load(other).status().code(),
            absl::StatusCode::kInvalidArgument);
  state_ = saved;
  state_.mutable_memory(0)->set_length(100);
  EXPECT_EQ(Load(other).status().code(),
            absl::StatusCode::kInvalidArgument);
  state_ = saved;
  auto ok = Load(other);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(Read(*(*ok)[0], kA), "x");
}

// membarrier(2) registrations are the address space's: a restored program
// that registered before the save may still use PRIVATE_EXPEDITED.
TEST_F(MmStateTest, MembarrierRegistrationsComeBack) {
  mm::MemoryFile* mf = File();
  auto m = NewMm(mf);
  m->membarrier_registrations().store((1u << 2) | (1u << 4));
  ASSERT_TRUE(Save(mf, {m}).ok());
  const pb::State saved = state_;
  auto loaded = Load(File());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)[0]->membarrier_registrations().load(),
            (1u << 2) | (1u << 4));
  state_ = saved;
  state_.mutable_mms(0)->set_membarrier_registrations(1u << 3);
  EXPECT_EQ(Load(File()).status().code(), absl::StatusCode::kInvalidArgument);
}


// Through the kernel, as a checkpoint runs it: init and its fork'ed child
// come back with their address spaces, still sharing untouched pages.
TEST(MmStateKernelTest, ForkedProcessesThroughTheKernel) {
  kernel::testing::NoSyscalls nosys;
  auto new_kernel = [&] {
    return std::make_unique<kernel::Kernel>(
        NewMemoryFile(), std::make_unique<kernel::testing::FakePlatform>(),
        &nosys, kernel::KernelOptions{});
  };
  auto vfs_mf = NewMemoryFile();
  fs::TmpFs tmp(vfs_mf.get(), fs::TmpFsOptions{});
  auto vfs = std::make_shared<fs::Vfs>(tmp.Root(), "tmpfs", "rootfs", false);
  auto fsctx = std::make_shared<fs::FsContext>(vfs->Root(), vfs->Root());

  auto a = new_kernel();
  auto mm = NewMm(&a->memory_file());
  ASSERT_EQ(mm->Mmap(kA, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kA));
  ASSERT_EQ(mm->Mmap(kB, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kB));
  Write(*mm, kA, "A");
  Write(*mm, kB, "B");
  platform::CpuState cpu{};
  auto init = a->CreateInit(mm, std::make_shared<fs::FdTable>(64), fsctx, cpu);
  ASSERT_TRUE(init.ok()) << init.status();
  auto forked = mm->Fork(std::make_unique<FakeAddressSpace>());
  ASSERT_TRUE(forked.ok());
  auto child = a->CreateProcess(**init, std::move(forked).value(),
                                std::make_shared<fs::FdTable>(64), fsctx,
                                SIGCHLD, cpu);
  ASSERT_TRUE(child.ok()) << child.status();
  Write(*mm, kA, "A, init's");
  const pid_t child_pid = (*child)->tid();

  pb::State st;
  MemoryPages pages(a->memory_file().Internal(0));
  {
    Saver s(&st, &pages);
    ASSERT_TRUE(FsState::SaveVfs(s, *vfs).ok());
    MmState mms;
    absl::Status saved = KernelState::SaveKernel(s, *a, *vfs, mms);
    ASSERT_TRUE(saved.ok()) << saved;
  }
  EXPECT_EQ(st.mms_size(), 2);
  EXPECT_EQ(pages.stored_pages(), 3u);  // A twice, B once

  auto b = new_kernel();
  Loader l(&st, &pages, &b->memory_file());
  auto vfs2 = FsState::LoadVfs(l);
  ASSERT_TRUE(vfs2.ok()) << vfs2.status();
  MmState mms;
  absl::Status loaded = KernelState::LoadKernel(l, *b, **vfs2, mms);
  ASSERT_TRUE(loaded.ok()) << loaded;
  mm::MM& init_mm = b->FindGroup(1)->mm();
  mm::MM& child_mm = b->FindGroup(child_pid)->mm();
  EXPECT_EQ(b->memory_file().SharedBytes(), kPage);
  EXPECT_EQ(Read(init_mm, kA), "A, init's");
  EXPECT_EQ(Read(child_mm, kA), "A");
  Write(child_mm, kB, "B, the child's");
  EXPECT_EQ(Read(init_mm, kB), "B");
}

}  // namespace
}  // namespace sandboxd::state
