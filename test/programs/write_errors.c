/* Error paths of write/writev/read: EFAULT, EBADF, EINVAL, partial writes.
 * stdin is /dev/null (read-only), stdout a file or pipe (write-only). */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"

/* The bad pointers and counts below are the point of this test. */
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wpragmas"

int main(void) {
  /* Everything printed so far must be out before the raw writes below. */
  setvbuf(stdout, NULL, _IONBF, 0);

  CHECK_ERRNO("write from a bad pointer -> EFAULT", write(1, (void *)8, 10), EFAULT);
  CHECK_ERRNO("write from a kernel address -> EFAULT", write(1, (void *)0xffff800000000000ul, 10), EFAULT);
  CHECK_ERRNO("write to a never-opened fd -> EBADF", write(100, "x", 1), EBADF);
  CHECK_ERRNO("write to a negative fd -> EBADF", write(-1, "x", 1), EBADF);
  CHECK_ERRNO("write to read-only stdin -> EBADF", write(0, "x", 1), EBADF);
  char buf[16];
  CHECK_ERRNO("read from write-only stdout -> EBADF", read(1, buf, sizeof buf), EBADF);
  CHECK_ERRNO("read from a never-opened fd -> EBADF", read(100, buf, sizeof buf), EBADF);
  CHECK("read from /dev/null returns 0", read(0, buf, sizeof buf) == 0);
  CHECK("write of 0 bytes returns 0", write(1, buf, 0) == 0);

  /* writev/readv argument errors. */
  struct iovec iov[2] = {{(void *)"ab", 2}, {(void *)8, 4}};
  CHECK_ERRNO("writev with a bad iovec array -> EFAULT", writev(1, (struct iovec *)8, 1), EFAULT);
  CHECK_ERRNO("writev iovcnt -1 -> EINVAL", writev(1, iov, -1), EINVAL);
  CHECK_ERRNO("writev iovcnt 1025 -> EINVAL", writev(1, iov, 1025), EINVAL);
  CHECK("writev iovcnt 0 returns 0", writev(1, iov, 0) == 0);
  struct iovec bad1[1] = {{(void *)8, 4}};
  CHECK_ERRNO("writev whose only buffer is bad -> EFAULT", writev(1, bad1, 1), EFAULT);
  struct iovec huge[2] = {{(void *)"ab", 2}, {(void *)"cd", SIZE_MAX}};
  CHECK_ERRNO("writev total length overflow -> EINVAL", writev(1, huge, 2), EINVAL);
  CHECK_ERRNO("readv on write-only stdout -> EBADF", readv(1, iov, 1), EBADF);
  CHECK_ERRNO("writev to bad fd -> EBADF", writev(100, iov, 1), EBADF);

  /* Partial write: the buffer runs into an unmapped page; the bytes before
   * the fault are written and their count returned. */
  char *two = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(two + 4096, 4096);
  char *tail = two + 4096 - 8;
  memcpy(tail, "PARTIAL\n", 8);
  ssize_t w = write(1, tail, 100);
  printf("partial write returned %zd\n", w);
  CHECK("write spanning into an unmapped page writes the mapped part", w == 8);
  /* The same with writev: first iovec good, second bad -> short count. */
  struct iovec part[2] = {{(void *)"IOV-OK\n", 7}, {(void *)8, 4}};
  w = writev(1, part, 2);
  printf("writev with good+bad iovecs returned %zd\n", w);
  CHECK("writev good+bad returns the good part", w == 7);
  return finish();
}
