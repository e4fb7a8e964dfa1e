#include "sentry/fs/pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sentry/fs/testing/fake_blocker.h"

namespace sandboxd::fs {
namespace {

class PipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [r, w] = PipeEnd::Create(0);
    r_ = std::move(r);
    w_ = std::move(w);
  }
  int64_t Put(const std::string& s) { return w_->Write(s.data(), s.size(), -1, b_.io()); }
  std::string Get(size_t n) {
    std::string s(n, '\0');
    int64_t r = r_->Read(s.data(), n, -1, b_.io());
    return r < 0 ? "<" + std::to_string(r) + ">" : s.substr(0, r);
  }

  FakeBlocker b_;
  std::shared_ptr<PipeEnd> r_, w_;
};

TEST_F(PipeTest, BytesComeOutInOrder) {
  EXPECT_EQ(Put("hello "), 6);
  EXPECT_EQ(Put("world"), 5);
  EXPECT_EQ(Get(3), "hel");
  EXPECT_EQ(Get(100), "lo world");
}

TEST_F(PipeTest, EndsCheckDirectionAndOffsets) {
  char c;
  EXPECT_EQ(r_->Write("x", 1, -1, b_.io()), -EBADF);
  EXPECT_EQ(w_->Read(&c, 1, -1, b_.io()), -EBADF);
  EXPECT_EQ(r_->Read(&c, 1, 0, b_.io()), -ESPIPE);
  EXPECT_EQ(r_->Seek(0, SEEK_CUR), -ESPIPE);
  EXPECT_EQ(r_->StatusFlags(), O_RDONLY);
  EXPECT_EQ(w_->StatusFlags(), O_WRONLY);
  struct stat a, b;
  ASSERT_EQ(r_->Stat(&a), 0);
  ASSERT_EQ(w_->Stat(&b), 0);
  EXPECT_TRUE(S_ISFIFO(a.st_mode));
  EXPECT_EQ(a.st_ino, b.st_ino);
}

TEST_F(PipeTest, EofOnceWritersAreGone) {
  Put("ab");
  w_.reset();
  EXPECT_EQ(Get(10), "ab");
  EXPECT_EQ(Get(10), "");
  EXPECT_EQ(r_->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLHUP));
}

TEST_F(PipeTest, EpipeOnceReadersAreGone) {
  r_.reset();
  EXPECT_EQ(Put("x"), -EPIPE);
  EXPECT_EQ(w_->Readiness(POLLOUT), static_cast<waiter::EventMask>(POLLOUT | POLLERR));
}

TEST_F(PipeTest, CapacityAndAtomicWrites) {
  w_->SetStatusFlags(O_NONBLOCK);
  std::string big(100000, 'a');
  EXPECT_EQ(Put(big), 65536);  // a long write is cut at the capacity
  EXPECT_EQ(Put("x"), -EAGAIN);
  int n = 0;
  ASSERT_EQ(r_->Ioctl(FIONREAD, &n), 0);
  EXPECT_EQ(n, 65536);
  EXPECT_EQ(w_->Readiness(POLLOUT), 0u);
  EXPECT_EQ(Get(150).size(), 150u);
  // 150 bytes of room: 100 fit, 200 (<= PIPE_BUF) are not split.
  EXPECT_EQ(Put(std::string(200, 'b')), -EAGAIN);
  EXPECT_EQ(Put(std::string(100, 'b')), 100);
}

TEST_F(PipeTest, NonblockingReadOfEmptyPipe) {
  r_->SetStatusFlags(O_NONBLOCK);
  EXPECT_EQ(r_->StatusFlags(), O_RDONLY | O_NONBLOCK);
  EXPECT_EQ(Get(1), "<-11>");
}

TEST_F(PipeTest, BlockedReaderIsWokenByWriterThread) {
  std::string got;
  std::thread reader([&] { got = Get(10); });
  b_.AwaitSleeps(1);  // the reader is asleep in the Blocker
  FakeBlocker wb;
  ASSERT_EQ(w_->Write("hi", 2, -1, wb.io()), 2);
  reader.join();
  EXPECT_EQ(got, "hi");
}

TEST_F(PipeTest, BlockedReaderSeesEofWhenWriterCloses) {
  std::string got = "unset";
  std::thread reader([&] { got = Get(10); });
  b_.AwaitSleeps(1);
  w_.reset();
  reader.join();
  EXPECT_EQ(got, "");
}

TEST_F(PipeTest, BlockedWriterIsWokenByReader) {
  std::string big(65536, 'a');
  ASSERT_EQ(Put(big), 65536);
  int64_t wrote = 0;
  std::thread writer([&] { wrote = Put(std::string(4096, 'b')); });
  b_.AwaitSleeps(1);
  FakeBlocker rb;
  std::string buf(8192, '\0');
  ASSERT_EQ(r_->Read(buf.data(), buf.size(), -1, rb.io()), 8192);
  writer.join();
  EXPECT_EQ(wrote, 4096);
}

TEST_F(PipeTest, LongBlockingWriteCompletesAcrossReads) {
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 7);
  int64_t wrote = 0;
  std::thread writer([&] { wrote = Put(data); });
  FakeBlocker rb;
  std::string got;
  while (got.size() < data.size()) {
    std::string buf(7000, '\0');
    int64_t n = r_->Read(buf.data(), buf.size(), -1, rb.io());
    ASSERT_GT(n, 0);
    got.append(buf.data(), n);
  }
  writer.join();
  EXPECT_EQ(wrote, static_cast<int64_t>(data.size()));
  EXPECT_EQ(got, data);
}

TEST_F(PipeTest, InterruptedReadReturnsEintr) {
  int64_t r = 0;
  std::thread reader([&] {
    char c;
    r = r_->Read(&c, 1, -1, b_.io());
  });
  b_.AwaitSleeps(1);
  b_.Interrupt();
  reader.join();
  EXPECT_EQ(r, -EINTR);
}

TEST_F(PipeTest, InterruptedWriteKeepsWhatWasWritten) {
  ASSERT_EQ(Put(std::string(60000, 'a')), 60000);
  int64_t r = 0;
  std::thread writer([&] { r = Put(std::string(10000, 'b')); });  // > PIPE_BUF
  b_.AwaitSleeps(1);
  b_.Interrupt();
  writer.join();
  EXPECT_EQ(r, 65536 - 60000);
}

TEST_F(PipeTest, WaitersAreNotifiedOfDataAndClose) {
  waiter::CountingWaiter in, out;
  r_->EventRegister(&in, POLLIN);
  w_->EventRegister(&out, POLLOUT);
  Put("x");
  EXPECT_EQ(in.count(), 1);
  EXPECT_EQ(out.count(), 0);
  Get(1);
  EXPECT_EQ(out.count(), 1);
  w_->EventUnregister(&out);
  w_.reset();
  EXPECT_EQ(in.count(), 2);
  EXPECT_TRUE(in.events() & POLLHUP);
  r_->EventUnregister(&in);
}

TEST_F(PipeTest, SetCapacity) {
  Pipe& p = r_->pipe();
  EXPECT_EQ(p.SetCapacity(100000), 131072);
  EXPECT_EQ(p.SetCapacity(1), 4096);
  EXPECT_EQ(p.SetCapacity(Pipe::kMaxCapacity + 1), -EPERM);
  EXPECT_EQ(p.SetCapacity(8192), 8192);
  ASSERT_EQ(Put(std::string(5000, 'a')), 5000);
  EXPECT_EQ(p.SetCapacity(4096), -EBUSY);
}

TEST_F(PipeTest, PeekAndDiscardForSplice) {
  Pipe& p = r_->pipe();
  EXPECT_EQ(p.WaitReadable(/*nonblock=*/true, b_.io()), -EAGAIN);
  EXPECT_EQ(Put("abcdef"), 6);
  EXPECT_EQ(p.WaitReadable(true, b_.io()), 6);
  char buf[8] = {};
  EXPECT_EQ(p.Peek(buf, 4), 4u);
  EXPECT_EQ(std::string(buf, 4), "abcd");
  EXPECT_EQ(p.Buffered(), 6u);  // nothing consumed
  EXPECT_EQ(p.Discard(2), 2u);
  EXPECT_EQ(p.Discard(100), 4u);  // at most what is there
  EXPECT_EQ(p.Buffered(), 0u);
  EXPECT_EQ(p.WaitWritable(true, b_.io()),
            static_cast<int64_t>(Pipe::kDefaultCapacity));
  w_.reset();
  EXPECT_EQ(p.WaitReadable(true, b_.io()), 0);  // EOF
}

TEST_F(PipeTest, PeekSpansChunks) {
  std::string big(10000, 'x');
  big[4095] = 'a';
  big[4096] = 'b';
  EXPECT_EQ(Put(big), 10000);
  EXPECT_EQ(r_->pipe().Discard(4000), 4000u);
  std::string out(200, '\0');
  EXPECT_EQ(r_->pipe().Peek(out.data(), 200), 200u);
  EXPECT_EQ(out.substr(95, 2), "ab");
  EXPECT_EQ(Get(20000).size(), 6000u);
}

TEST_F(PipeTest, WaitWritableWithoutReadersIsEpipe) {
  Pipe& p = w_->pipe();
  r_.reset();
  EXPECT_EQ(p.WaitWritable(true, b_.io()), -EPIPE);
}

// FIFOs: fifo_open's rules, through a Fifo as a FIFO inode holds one.
TEST(FifoTest, NonblockingOpens) {
  Fifo fifo;
  FakeBlocker b;
  std::shared_ptr<File> w;
  EXPECT_EQ(fifo.Open(O_WRONLY | O_NONBLOCK, b.io(), nullptr, &w), -ENXIO);
  std::shared_ptr<File> r;
  ASSERT_EQ(fifo.Open(O_RDONLY | O_NONBLOCK, b.io(), nullptr, &r), 0);
  EXPECT_TRUE(fifo.InUse());
  // No writer has opened yet: EOF, but no POLLHUP.
  char buf[8];
  EXPECT_EQ(r->Read(buf, 8, -1, b.io()), 0);
  EXPECT_EQ(static_cast<PipeEnd*>(r.get())->Readiness(POLLIN), 0u);
  ASSERT_EQ(fifo.Open(O_WRONLY | O_NONBLOCK, b.io(), nullptr, &w), 0);
  ASSERT_EQ(w->Write("ab", 2, -1, b.io()), 2);
  EXPECT_EQ(r->Read(buf, 8, -1, b.io()), 2);
  w.reset();
  // A writer came and went: now POLLHUP.
  EXPECT_EQ(static_cast<PipeEnd*>(r.get())->Readiness(POLLIN),
            static_cast<waiter::EventMask>(POLLHUP));
  r.reset();
  EXPECT_FALSE(fifo.InUse());
  EXPECT_EQ(fifo.Open(3, b.io(), nullptr, &r), -EINVAL);
}

TEST(FifoTest, OpenersShareOnePipeUntilAllClose) {
  Fifo fifo;
  FakeBlocker b;
  std::shared_ptr<File> rw, r;
  ASSERT_EQ(fifo.Open(O_RDWR, b.io(), nullptr, &rw), 0);  // never waits
  ASSERT_EQ(fifo.Open(O_RDONLY, b.io(), nullptr, &r), 0);  // rw writes
  ASSERT_EQ(rw->Write("xyz", 3, -1, b.io()), 3);
  char buf[8];
  EXPECT_EQ(r->Read(buf, 8, -1, b.io()), 3);
  ASSERT_EQ(rw->Write("left", 4, -1, b.io()), 4);
  rw.reset();
  r.reset();
  ASSERT_EQ(fifo.Open(O_RDWR | O_NONBLOCK, b.io(), nullptr, &rw), 0);
  EXPECT_EQ(rw->Read(buf, 8, -1, b.io()), -EAGAIN);  // a new, empty pipe
}

TEST(FifoTest, BlockingOpenWaitsForThePartner) {
  Fifo fifo;
  FakeBlocker b;
  std::shared_ptr<File> r;
  int rr = 1;
  std::thread t([&] { rr = fifo.Open(O_RDONLY, b.io(), nullptr, &r); });
  b.AwaitSleeps(1);
  FakeBlocker b2;
  std::shared_ptr<File> w;
  ASSERT_EQ(fifo.Open(O_WRONLY, b2.io(), nullptr, &w), 0);  // a reader waits
  t.join();
  ASSERT_EQ(rr, 0);
  ASSERT_EQ(w->Write("q", 1, -1, b2.io()), 1);
  char c;
  EXPECT_EQ(r->Read(&c, 1, -1, b.io()), 1);
}

TEST(FifoTest, InterruptedOpenLeavesNoEnd) {
  Fifo fifo;
  FakeBlocker b;
  std::shared_ptr<File> w;
  int rw = 1;
  std::thread t([&] { rw = fifo.Open(O_WRONLY, b.io(), nullptr, &w); });
  b.AwaitSleeps(1);
  b.Interrupt();
  t.join();
  EXPECT_EQ(rw, -EINTR);
  EXPECT_EQ(w, nullptr);
  EXPECT_FALSE(fifo.InUse());
}

}  // namespace
}  // namespace sandboxd::fs
