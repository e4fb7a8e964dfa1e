#include "client/sandboxctl/terminal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cstdlib>

namespace sandboxd::client::ctl {
namespace {

struct termios saved_termios;
bool raw_mode = false;
int winch_pipe[2] = {-1, -1};

void OnWinch(int) {
  const char c = 0;
  (void)!write(winch_pipe[1], &c, 1);
}

}  // namespace

void RestoreTerminal() {
  if (raw_mode) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_termios);
  raw_mode = false;
}

void SetUpTty(ExecIo* io) {
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
    struct termios raw = saved_termios;
    cfmakeraw(&raw);
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) == 0) {
      raw_mode = true;
      atexit(RestoreTerminal);
    }
  }
  if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
    struct sigaction sa = {};
    sa.sa_handler = OnWinch;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGWINCH, &sa, nullptr);
    io->resize_fd = winch_pipe[0];
  }
  io->get_size = [](uint32_t* rows, uint32_t* cols) {
    struct winsize ws = {};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 &&
        ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) != 0) {
      return false;
    }
    *rows = ws.ws_row;
    *cols = ws.ws_col;
    return true;
  };
}

}  // namespace sandboxd::client::ctl
