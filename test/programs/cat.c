/* A minimal cat: copies stdin to stdout (read/write only). */
#include <errno.h>
#include <unistd.h>

int main(void) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(0, buf, sizeof buf);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(1, buf + off, (size_t)(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return 2;
      }
      off += w;
    }
  }
}
