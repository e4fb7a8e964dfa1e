#include "sentry/fs/tty/line_discipline.h"

#include <signal.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::fs::tty {
namespace {

class LineDisciplineTest : public ::testing::Test {
 protected:
  // Types `s`; returns what was echoed.
  std::string Type(const std::string& s) {
    std::string echo;
    ld_.Input(reinterpret_cast<const uint8_t*>(s.data()), s.size(), &echo,
              &signals_);
    return echo;
  }
  std::string ReadAll(size_t n = 4096) {
    std::string out(n, '\0');
    size_t k = ld_.Read(reinterpret_cast<uint8_t*>(out.data()), n);
    out.resize(k);
    return out;
  }
  void Set(uint32_t lflag_off, uint32_t lflag_on = 0) {
    KernelTermios t = ld_.termios();
    t.c_lflag = (t.c_lflag & ~lflag_off) | lflag_on;
    ld_.SetTermios(t);
  }

  LineDiscipline ld_;
  std::vector<int> signals_;
};

TEST_F(LineDisciplineTest, CanonicalLineWithEchoAndCrMapping) {
  EXPECT_EQ(Type("ab"), "ab");
  EXPECT_FALSE(ld_.Readable());
  EXPECT_EQ(ld_.Available(), 0u);
  // ICRNL turns CR into NL; the echo of NL is CRNL (ONLCR).
  EXPECT_EQ(Type("\r"), "\r\n");
  ASSERT_TRUE(ld_.Readable());
  EXPECT_EQ(ld_.Available(), 3u);
  EXPECT_EQ(ReadAll(), "ab\n");
}

TEST_F(LineDisciplineTest, ReadsAtMostOneLine) {
  Type("one\ntwo\n");
  EXPECT_EQ(ReadAll(), "one\n");
  EXPECT_EQ(ReadAll(2), "tw");
  EXPECT_EQ(ReadAll(), "o\n");
  EXPECT_FALSE(ld_.Readable());
}

TEST_F(LineDisciplineTest, EraseKillAndWerase) {
  EXPECT_EQ(Type("abc\x7f"), "abc\b \b");
  EXPECT_EQ(Type("\b"), "^H");  // ^H is not ERASE by default: kept, echoed
  Type("\x7f");                  // ...and erased: two columns
  EXPECT_EQ(Type("\n"), "\r\n");
  EXPECT_EQ(ReadAll(), "ab\n");
  // KILL with ECHOKE erases every character visibly.
  EXPECT_EQ(Type("xy\x15"), "xy\b \b\b \b");
  // WERASE: trailing blanks, then the word.
  Type("foo bar  \x17");
  Type("\n");
  EXPECT_EQ(ReadAll(), "foo \n");
  // ERASE on an empty line does nothing.
  EXPECT_EQ(Type("\x7f"), "");
}

TEST_F(LineDisciplineTest, EraseWithoutEchoe) {
  Set(ECHOE);
  EXPECT_EQ(Type("a\x7f"), "a^?");
  Set(ECHOKE);
  // KILL without ECHOKE: the kill character, then NL for ECHOK.
  EXPECT_EQ(Type("b\x15"), "b^U\r\n");
}

TEST_F(LineDisciplineTest, EofAndEol) {
  Type("ab\x04");
  EXPECT_EQ(ReadAll(), "ab");  // EOF ends the line without a terminator
  Type("\x04");
  ASSERT_TRUE(ld_.Readable());
  EXPECT_EQ(ReadAll(), "");  // EOF at the start of a line: read returns 0
  EXPECT_FALSE(ld_.Readable());
  KernelTermios t = ld_.termios();
  t.c_cc[VEOL] = ';';
  ld_.SetTermios(t);
  EXPECT_EQ(Type("x;"), "x;");
  EXPECT_EQ(ReadAll(), "x;");
}

TEST_F(LineDisciplineTest, EchoFlags) {
  Set(ECHO);
  EXPECT_EQ(Type("secret\n"), "");
  Set(0, ECHONL);
  EXPECT_EQ(Type("pw\n"), "\r\n");
  Set(ECHONL, ECHO);
  Set(ECHOCTL);
  EXPECT_EQ(Type("\x01"), "\x01");
}

TEST_F(LineDisciplineTest, SignalsFlushInput) {
  Type("partial");
  EXPECT_EQ(Type("\x03"), "^C");
  Type("\x1c\x1a");
  EXPECT_EQ(signals_, (std::vector<int>{SIGINT, SIGQUIT, SIGTSTP}));
  Type("\n");
  EXPECT_EQ(ReadAll(), "\n");  // "partial" was flushed
  Set(ISIG);
  signals_.clear();
  Type("\x03\n");
  EXPECT_TRUE(signals_.empty());
  EXPECT_EQ(ReadAll(), "\x03\n");
  Set(0, ISIG | NOFLSH);
  Type("kept\x03\n");
  EXPECT_EQ(ReadAll(), "kept\n");
}

TEST_F(LineDisciplineTest, InputMapping) {
  KernelTermios t = ld_.termios();
  t.c_iflag = IGNCR;
  ld_.SetTermios(t);
  Type("a\rb\n");
  EXPECT_EQ(ReadAll(), "ab\n");
  t.c_iflag = INLCR;
  t.c_lflag &= ~ICANON;
  ld_.SetTermios(t);
  Type("\n");
  EXPECT_EQ(ReadAll(), "\r");
}

TEST_F(LineDisciplineTest, RawModeAndSwitching) {
  Type("half");
  Set(ICANON | ECHO);
  // Leaving canonical mode makes the edited line readable.
  ASSERT_TRUE(ld_.Readable());
  EXPECT_EQ(Type("\x7f"), "");  // no editing in raw mode
  EXPECT_EQ(ld_.Available(), 5u);
  EXPECT_EQ(ReadAll(3), "hal");
  EXPECT_EQ(ReadAll(), "f\x7f");
  // A raw buffer holds 4095 bytes; more waits.
  std::string big(5000, 'x');
  std::string echo;
  EXPECT_EQ(ld_.Input(reinterpret_cast<const uint8_t*>(big.data()), big.size(),
                      &echo, &signals_),
            4095u);
  EXPECT_FALSE(ld_.HasRoom());
}

TEST_F(LineDisciplineTest, OutputProcessing) {
  std::string out;
  const std::string s = "a\nb\r";
  ld_.Output(reinterpret_cast<const uint8_t*>(s.data()), s.size(), &out);
  EXPECT_EQ(out, "a\r\nb\r");
  KernelTermios t = ld_.termios();
  t.c_oflag = OPOST | OCRNL;
  ld_.SetTermios(t);
  out.clear();
  ld_.Output(reinterpret_cast<const uint8_t*>(s.data()), s.size(), &out);
  EXPECT_EQ(out, "a\nb\n");
  t.c_oflag = ONLCR;  // no OPOST: nothing is processed
  ld_.SetTermios(t);
  out.clear();
  ld_.Output(reinterpret_cast<const uint8_t*>(s.data()), s.size(), &out);
  EXPECT_EQ(out, s);
}

TEST_F(LineDisciplineTest, CanonicalLineLimit) {
  std::string big(5000, 'y');
  Type(big);
  Type("\n");
  EXPECT_EQ(ld_.Available(), 4096u);  // 4095 characters and the newline
}

}  // namespace
}  // namespace sandboxd::fs::tty
