#include "daemon/output_log.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

std::string Concat(const OutputLog::ReadResult& r) {
  std::string s;
  for (const OutputChunk& c : r.chunks) s += c.data;
  return s;
}

TEST(OutputLogTest, ReadsInOrderWithStreams) {
  OutputLog log(1024);
  log.Append(OutputStream::kStdout, "out1");
  log.Append(OutputStream::kStderr, "err1");
  uint64_t cursor = 0;
  OutputLog::ReadResult r = log.Read(&cursor, absl::ZeroDuration());
  ASSERT_EQ(r.chunks.size(), 2u);
  EXPECT_EQ(r.chunks[0].stream, OutputStream::kStdout);
  EXPECT_EQ(r.chunks[1].stream, OutputStream::kStderr);
  EXPECT_EQ(Concat(r), "out1err1");
  EXPECT_EQ(cursor, 8u);
  EXPECT_FALSE(r.eof);
  log.Close();
  r = log.Read(&cursor, absl::Seconds(5));
  EXPECT_TRUE(r.chunks.empty());
  EXPECT_TRUE(r.eof);
}

TEST(OutputLogTest, DropsOldestAndSaysHowMuch) {
  OutputLog log(10);
  log.Append(OutputStream::kStdout, "aaaaa");
  log.Append(OutputStream::kStdout, "bbbbb");
  log.Append(OutputStream::kStdout, "ccccc");  // evicts "aaaaa"
  uint64_t cursor = 0;
  OutputLog::ReadResult r = log.Read(&cursor, absl::ZeroDuration());
  EXPECT_EQ(r.dropped, 5u);
  EXPECT_EQ(Concat(r), "bbbbbccccc");
}

TEST(OutputLogTest, ReadTimesOutEmpty) {
  OutputLog log(10);
  uint64_t cursor = 0;
  OutputLog::ReadResult r = log.Read(&cursor, absl::Milliseconds(10));
  EXPECT_TRUE(r.chunks.empty());
  EXPECT_FALSE(r.eof);
}

TEST(OutputLogTest, PinnedReaderLosesNothing) {
  OutputLog log(16);
  uint64_t cursor = 0;
  log.Pin(&cursor);
  std::string want;
  std::thread writer([&] {
    for (int i = 0; i < 200; i++) {
      log.Append(OutputStream::kStdout, std::to_string(i) + ",");
    }
    log.Close();
  });
  for (int i = 0; i < 200; i++) want += std::to_string(i) + ",";
  std::string got;
  for (;;) {
    OutputLog::ReadResult r = log.Read(&cursor, absl::Seconds(5));
    EXPECT_EQ(r.dropped, 0u);
    got += Concat(r);
    if (r.eof) break;
  }
  writer.join();
  log.Unpin();
  EXPECT_EQ(got, want);
}

TEST(OutputLogTest, UnpinFreesAWaitingWriter) {
  OutputLog log(4);
  uint64_t cursor = 0;
  log.Pin(&cursor);
  log.Append(OutputStream::kStdout, "abcd");
  std::thread writer([&] { log.Append(OutputStream::kStdout, "efgh"); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(log.end(), 4u);  // still waiting for the reader
  log.Unpin();
  writer.join();
  EXPECT_EQ(log.end(), 8u);
}

TEST(OutputLogTest, CloseFreesAWaitingWriter) {
  OutputLog log(4);
  uint64_t cursor = 0;
  log.Pin(&cursor);
  log.Append(OutputStream::kStdout, "abcd");
  std::thread writer([&] { log.Append(OutputStream::kStdout, "efgh"); });
  absl::SleepFor(absl::Milliseconds(20));
  log.Close();
  writer.join();
  EXPECT_EQ(log.end(), 4u);
}

TEST(OutputLogTest, PersistedOutputComesBackInOrder) {
  char tmpl[] = "/tmp/output_log_test.XXXXXX";
  const std::string path = std::string(mkdtemp(tmpl)) + "/output.log";
  {
    OutputLog log(1024);
    ASSERT_TRUE(log.PersistTo(path).ok());
    log.Append(OutputStream::kStdout, "out1");
    log.Append(OutputStream::kStderr, "err1");
  }
  {
    // A crash in the middle of a record leaves it torn: it is dropped,
    // and what is appended next follows the last whole one.
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f << std::string("\0\x10\0\0\0par", 8);
  }
  OutputLog again(1024);
  ASSERT_TRUE(again.LoadFrom(path).ok());
  ASSERT_TRUE(again.PersistTo(path).ok());
  again.Append(OutputStream::kStdout, "out2");
  OutputLog third(1024);
  ASSERT_TRUE(third.LoadFrom(path).ok());
  uint64_t cursor = 0;
  OutputLog::ReadResult r = third.Read(&cursor, absl::ZeroDuration());
  ASSERT_EQ(r.chunks.size(), 3u);
  EXPECT_EQ(r.chunks[1].stream, OutputStream::kStderr);
  EXPECT_EQ(Concat(r), "out1err1out2");
}

TEST(OutputLogTest, PersistedFileStaysBounded) {
  char tmpl[] = "/tmp/output_log_test.XXXXXX";
  const std::string path = std::string(mkdtemp(tmpl)) + "/output.log";
  OutputLog log(100);
  ASSERT_TRUE(log.PersistTo(path).ok());
  for (int i = 0; i < 1000; i++) log.Append(OutputStream::kStdout, "0123456789");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_LE(static_cast<size_t>(f.tellg()), 4 * 100 + 2 * 15u);
  OutputLog again(100);
  ASSERT_TRUE(again.LoadFrom(path).ok());
  uint64_t cursor = 0;
  std::string all = Concat(again.Read(&cursor, absl::ZeroDuration()));
  EXPECT_EQ(all.substr(all.size() - 10), "0123456789");
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
