#include "sentry/fs/tty/line_discipline.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace sandboxd::fs::tty {

void LineDiscipline::SetTermios(const KernelTermios& t) {
  const bool was_canonical = canonical();
  termios_ = t;
  if (was_canonical && !canonical()) {
    for (const std::string& l : lines_) raw_ += l;
    raw_ += edit_;
    lines_.clear();
    edit_.clear();
  } else if (!was_canonical && canonical()) {
    edit_ = std::move(raw_);
    raw_.clear();
  }
}

size_t LineDiscipline::Buffered() const {
  size_t n = edit_.size() + raw_.size();
  for (const std::string& l : lines_) n += l.size();
  return n;
}

bool LineDiscipline::HasRoom() const {
  return canonical() || raw_.size() < kBufSize - 1;
}

bool LineDiscipline::Readable() const {
  return canonical() ? !lines_.empty() : !raw_.empty();
}

size_t LineDiscipline::Available() const {
  if (!canonical()) return raw_.size();
  size_t n = 0;
  for (const std::string& l : lines_) n += l.size();
  return n;
}

size_t LineDiscipline::Read(uint8_t* buf, size_t n) {
  if (!canonical()) {
    size_t k = std::min(n, raw_.size());
    std::memcpy(buf, raw_.data(), k);
    raw_.erase(0, k);
    return k;
  }
  if (lines_.empty()) return 0;
  std::string& l = lines_.front();
  size_t k = std::min(n, l.size());
  std::memcpy(buf, l.data(), k);
  // An EOF line (empty) is consumed by the read that returns 0.
  if (k == l.size()) {
    lines_.pop_front();
  } else {
    l.erase(0, k);
  }
  return k;
}

void LineDiscipline::FlushInput() {
  lines_.clear();
  edit_.clear();
  raw_.clear();
}

void LineDiscipline::Output(const uint8_t* p, size_t n,
                            std::string* out) const {
  if (!(termios_.c_oflag & OPOST)) {
    out->append(reinterpret_cast<const char*>(p), n);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (c == '\n' && (termios_.c_oflag & ONLCR)) {
      out->append("\r\n");
    } else if (c == '\r' && (termios_.c_oflag & OCRNL)) {
      out->push_back('\n');
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

void LineDiscipline::EchoRaw(uint8_t c, std::string* echo) const {
  Output(&c, 1, echo);
}

void LineDiscipline::EchoChar(uint8_t c, std::string* echo) const {
  if ((termios_.c_lflag & ECHOCTL) && std::iscntrl(c) && c != '\t') {
    echo->push_back('^');
    echo->push_back(static_cast<char>(c ^ 0100));
    return;
  }
  EchoRaw(c, echo);
}

// Linux's eraser(): ERASE removes one character, WERASE the word before the
// cursor (trailing non-alphanumerics first), KILL the whole line.
void LineDiscipline::Erase(uint8_t c, std::string* echo) {
  if (edit_.empty()) return;
  const uint32_t l = termios_.c_lflag;
  const bool erase = Is(c, VERASE);
  const bool werase = !erase && Is(c, VWERASE);
  if (!erase && !werase) {  // KILL
    if (!(l & ECHO)) {
      edit_.clear();
      return;
    }
    if (!(l & ECHOK) || !(l & ECHOKE) || !(l & ECHOE)) {
      edit_.clear();
      EchoChar(c, echo);
      if (l & ECHOK) EchoRaw('\n', echo);
      return;
    }
  }
  int seen_alnums = 0;
  while (!edit_.empty()) {
    uint8_t prev = static_cast<uint8_t>(edit_.back());
    if (werase) {
      if (std::isalnum(prev) || prev == '_') {
        seen_alnums++;
      } else if (seen_alnums > 0) {
        break;
      }
    }
    edit_.pop_back();
    if (l & ECHO) {
      if (erase && !(l & ECHOE)) {
        EchoChar(c, echo);
      } else if (prev == '\t') {
        // Back to the tab's start: the width of the text before it,
        // counted from the start of the line.
        size_t col = 0;
        for (char ch : edit_) {
          if (ch == '\t') {
            col = (col | 7) + 1;
          } else if (std::iscntrl(static_cast<uint8_t>(ch))) {
            if (l & ECHOCTL) col += 2;
          } else {
            col++;
          }
        }
        size_t width = 8 - (col & 7);
        for (size_t i = 0; i < width; i++) EchoRaw('\b', echo);
      } else {
        const bool ctl = std::iscntrl(prev) != 0;
        if (ctl && (l & ECHOCTL)) echo->append("\b \b");
        if (!ctl || (l & ECHOCTL)) echo->append("\b \b");
      }
    }
    if (erase) break;
  }
}

size_t LineDiscipline::Input(const uint8_t* p, size_t n, std::string* echo,
                             std::vector<int>* signals) {
  const uint32_t iflag = termios_.c_iflag;
  const uint32_t lflag = termios_.c_lflag;
  size_t i = 0;
  for (; i < n; i++) {
    uint8_t c = p[i];
    if (iflag & ISTRIP) c &= 0x7f;
    if (lflag & ISIG) {
      int sig = Is(c, VINTR) ? SIGINT : Is(c, VQUIT) ? SIGQUIT
                : Is(c, VSUSP) ? SIGTSTP : 0;
      if (sig != 0) {
        if (!(lflag & NOFLSH)) FlushInput();
        signals->push_back(sig);
        if (lflag & ECHO) EchoChar(c, echo);
        continue;
      }
    }
    if (c == '\r') {
      if (iflag & IGNCR) continue;
      if (iflag & ICRNL) c = '\n';
    } else if (c == '\n' && (iflag & INLCR)) {
      c = '\r';
    }
    if (!canonical()) {
      if (raw_.size() >= kBufSize - 1) break;
      raw_.push_back(static_cast<char>(c));
      if (lflag & ECHO) EchoChar(c, echo);
      continue;
    }
    if (Is(c, VERASE) || Is(c, VKILL) || (Is(c, VWERASE) && (lflag & IEXTEN))) {
      Erase(c, echo);
      continue;
    }
    const bool eof = Is(c, VEOF);
    const bool eol = c == '\n' || Is(c, VEOL) || (Is(c, VEOL2) && (lflag & IEXTEN));
    if (eof || eol) {
      if (c == '\n') {
        if (lflag & (ECHO | ECHONL)) EchoRaw('\n', echo);
      } else if (!eof && (lflag & ECHO)) {
        EchoChar(c, echo);
      }
      if (!eof) edit_.push_back(static_cast<char>(c));
      lines_.push_back(std::move(edit_));
      edit_.clear();
      continue;
    }
    // A full line takes no more characters but its terminator.
    if (Buffered() >= kBufSize - 1) continue;
    edit_.push_back(static_cast<char>(c));
    if (lflag & ECHO) EchoChar(c, echo);
  }
  return i;
}

}  // namespace sandboxd::fs::tty
