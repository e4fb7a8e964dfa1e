/* /dev: the character devices (null(4), zero(4), full(4), random(4)), the
 * /proc/self/fd symlinks, and /dev/shm as a tmpfs of its own. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common.h"

#define TMPFS_MAGIC_ 0x01021994

static int is_chr(const char* path, unsigned maj, unsigned min) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == maj &&
         minor(st.st_rdev) == min;
}

static int all_zero(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != 0) return 0;
  }
  return 1;
}

static int link_is(const char* path, const char* want) {
  char buf[256];
  ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  if (n < 0) return 0;
  buf[n] = 0;
  return strcmp(buf, want) == 0;
}

static int dir_has(const char* dir, const char* name) {
  DIR* d = opendir(dir);
  if (d == NULL) return 0;
  struct dirent* e;
  int found = 0;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, name) == 0) found = 1;
  }
  closedir(d);
  return found;
}

int main(void) {
  unsigned char buf[8192];

  CHECK("null_is_chr_1_3", is_chr("/dev/null", 1, 3));
  CHECK("zero_is_chr_1_5", is_chr("/dev/zero", 1, 5));
  CHECK("full_is_chr_1_7", is_chr("/dev/full", 1, 7));
  CHECK("random_is_chr_1_8", is_chr("/dev/random", 1, 8));
  CHECK("urandom_is_chr_1_9", is_chr("/dev/urandom", 1, 9));
  CHECK("tty_is_chr_5_0", is_chr("/dev/tty", 5, 0));
  struct stat st;
  CHECK("null_mode_0666",
        stat("/dev/null", &st) == 0 && (st.st_mode & 0777) == 0666);

  /* null */
  int fd = open("/dev/null", O_RDWR);
  CHECK("null_open", fd >= 0);
  CHECK("null_read_eof", read(fd, buf, sizeof(buf)) == 0);
  CHECK("null_write_swallows", write(fd, "hello", 5) == 5);
  CHECK("null_pwrite", pwrite(fd, "hello", 5, 1 << 20) == 5);
  CHECK("null_lseek_zero", lseek(fd, 1000, SEEK_SET) == 0);
  CHECK("null_fstat_chr", fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) &&
                              st.st_rdev == makedev(1, 3));
  close(fd);
  fd = open("/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK("null_open_creat_trunc", fd >= 0);
  CHECK_ERRNO("null_read_on_wronly", read(fd, buf, 1), EBADF);
  close(fd);

  /* zero */
  fd = open("/dev/zero", O_RDWR);
  CHECK("zero_open", fd >= 0);
  memset(buf, 0xff, sizeof(buf));
  CHECK("zero_read_full_count", read(fd, buf, sizeof(buf)) == sizeof(buf));
  CHECK("zero_read_zeros", all_zero(buf, sizeof(buf)));
  memset(buf, 0xff, sizeof(buf));
  CHECK("zero_pread", pread(fd, buf, 100, 12345) == 100 && all_zero(buf, 100));
  CHECK("zero_write_swallows", write(fd, buf, 100) == 100);
  close(fd);

  /* full */
  fd = open("/dev/full", O_RDWR);
  CHECK("full_open", fd >= 0);
  CHECK_ERRNO("full_write_enospc", write(fd, "x", 1), ENOSPC);
  memset(buf, 0xff, sizeof(buf));
  CHECK("full_read_zeros", read(fd, buf, 64) == 64 && all_zero(buf, 64));
  close(fd);

  /* random, urandom */
  const char* rnd[] = {"/dev/random", "/dev/urandom"};
  for (int i = 0; i < 2; i++) {
    unsigned char a[32], b[32];
    fd = open(rnd[i], O_RDONLY);
    int ok = fd >= 0 && read(fd, a, sizeof(a)) == sizeof(a) &&
             read(fd, b, sizeof(b)) == sizeof(b) && memcmp(a, b, 32) != 0;
    CHECK(i == 0 ? "random_reads_differ" : "urandom_reads_differ", ok);
    if (fd >= 0) close(fd);
  }
  fd = open("/dev/urandom", O_RDONLY);
  CHECK("urandom_large_read", read(fd, buf, sizeof(buf)) == sizeof(buf));
  CHECK_ERRNO("urandom_write_on_rdonly", write(fd, buf, 1), EBADF);
  close(fd);

  /* tty: whether there is a controlling terminal depends on how the test is
   * run, so only the two possible outcomes are checked. */
  fd = open("/dev/tty", O_RDWR | O_NOCTTY);
  CHECK("tty_open_or_enxio", fd >= 0 || errno == ENXIO);
  if (fd >= 0) close(fd);

  /* symlinks into /proc/self/fd */
  CHECK("fd_link", link_is("/dev/fd", "/proc/self/fd"));
  CHECK("stdin_link", link_is("/dev/stdin", "/proc/self/fd/0"));
  CHECK("stdout_link", link_is("/dev/stdout", "/proc/self/fd/1"));
  CHECK("stderr_link", link_is("/dev/stderr", "/proc/self/fd/2"));

  /* listing */
  const char* names[] = {"null", "zero", "full", "random", "urandom",
                         "tty",  "fd",   "shm",  "pts"};
  int listed = 1;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (!dir_has("/dev", names[i])) {
      printf("missing /dev/%s\n", names[i]);
      listed = 0;
    }
  }
  CHECK("dev_lists_names", listed);

  /* /dev/shm: a tmpfs of its own */
  struct statfs sfs;
  CHECK("shm_is_tmpfs",
        statfs("/dev/shm", &sfs) == 0 && sfs.f_type == TMPFS_MAGIC_);
  struct stat dev_st, shm_st;
  CHECK("shm_is_own_mount", stat("/dev", &dev_st) == 0 &&
                                stat("/dev/shm", &shm_st) == 0 &&
                                dev_st.st_dev != shm_st.st_dev);
  CHECK("shm_sticky", (shm_st.st_mode & 01777) == 01777);
  char path[64];
  snprintf(path, sizeof(path), "/dev/shm/sbx_devices_test.%d", (int)getpid());
  fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK("shm_create", fd >= 0);
  CHECK("shm_write", write(fd, "shm!", 4) == 4);
  memset(buf, 0, 8);
  CHECK("shm_read", pread(fd, buf, 8, 0) == 4 && memcmp(buf, "shm!", 4) == 0);
  close(fd);
  CHECK("shm_unlink", unlink(path) == 0);

  /* errors */
  CHECK_ERRNO("open_dev_dir_for_write", open("/dev", O_WRONLY), EISDIR);
  CHECK_ERRNO("null_not_dir", open("/dev/null/x", O_RDONLY), ENOTDIR);
  CHECK_ERRNO("opendir_null", open("/dev/null", O_RDONLY | O_DIRECTORY),
              ENOTDIR);

  return finish();
}
