/* Bulk output through write/writev/stdio: 4 MiB of a deterministic pattern. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static char line[64];

static void mkline(unsigned i) {
  snprintf(line, sizeof line, "%08u abcdefghijklmnopqrstuvwxyz0123456789\n", i);
}

int main(void) {
  unsigned i = 0;
  /* 1: stdio, fully buffered by default on a file/pipe. */
  for (; i < 20000; i++) { mkline(i); fputs(line, stdout); }
  fflush(stdout);
  /* 2: one big write() of 1 MiB assembled in memory. */
  static char big[1 << 20];
  size_t off = 0;
  for (; off + 64 < sizeof big; i++) {
    mkline(i);
    size_t l = strlen(line);
    memcpy(big + off, line, l);
    off += l;
  }
  for (size_t done = 0; done < off;) {
    ssize_t w = write(1, big + done, off - done);
    if (w <= 0) return 1;
    done += (size_t)w;
  }
  /* 3: writev with many small iovecs. */
  static char bufs[512][64];
  struct iovec iov[512];
  for (int round = 0; round < 40; round++) {
    size_t total = 0;
    for (int k = 0; k < 512; k++, i++) {
      mkline(i);
      strcpy(bufs[k], line);
      iov[k].iov_base = bufs[k];
      iov[k].iov_len = strlen(line);
      total += iov[k].iov_len;
    }
    ssize_t w = writev(1, iov, 512);
    if (w != (ssize_t)total) return 2; /* regular files and pipes: full writes */
  }
  return 0;
}
