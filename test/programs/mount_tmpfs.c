/* mount(2) of tmpfs and umount2(2): options (mode, size), a distinct st_dev,
 * statfs's type, ENOSPC at the size limit, read-only mounts (EROFS),
 * remount, /proc/self/mounts, EBUSY while a file is open inside, lazy
 * detach, EINVAL for a non-mountpoint, ENODEV for an unknown type, ENOTDIR.
 *
 * Natively this needs root and runs in a private mount namespace of its own
 * (unshare(CLONE_NEWNS) with private propagation), so that nothing reaches
 * the host's mounts; in the sandbox the mounts are the sandbox's own. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common.h"

static int in_mounts(const char *dir) {
  FILE *f = fopen("/proc/self/mounts", "r");
  if (f == NULL) return -1;
  char line[1024];
  int found = 0;
  size_t n = strlen(dir);
  while (fgets(line, sizeof line, f) != NULL) {
    char *p = strchr(line, ' ');
    if (p != NULL && strncmp(p + 1, dir, n) == 0 && p[1 + n] == ' ' &&
        strncmp(p + 2 + n, "tmpfs ", 6) == 0) {
      found = 1;
    }
  }
  fclose(f);
  return found;
}

/* MemTotal of /proc/meminfo, in kB. */
static unsigned long long mem_total_kb(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  unsigned long long kb = 0;
  char line[256];
  while (fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
  }
  fclose(f);
  return kb;
}

int main(void) {
  /* Natively: a mount namespace of our own (a no-op failure in the
   * sandbox, which has one namespace and is the program's own). */
  if (unshare(CLONE_NEWNS) == 0) mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);

  char dir[64], file[96], big[96];
  snprintf(dir, sizeof dir, "/tmp/sbx_mount.%d", (int)getpid());
  snprintf(file, sizeof file, "%s/f", dir);
  snprintf(big, sizeof big, "%s/big", dir);
  CHECK("mkdir the mountpoint", mkdir(dir, 0755) == 0);
  struct stat before, st;
  stat(dir, &before);
  /* (Not /tmp: it may be a mountpoint itself, as under Bazel's sandbox.) */
  CHECK_ERRNO("umount2 of a plain directory: EINVAL", umount2(dir, 0), EINVAL);

  CHECK("mount tmpfs mode=0710,size=64k",
        mount("sbxtest", dir, "tmpfs", MS_NOSUID, "mode=0710,size=64k") == 0);
  CHECK("stat: the new root's mode", stat(dir, &st) == 0 && (st.st_mode & 07777) == 0710);
  CHECK("stat: another st_dev", st.st_dev != before.st_dev);
  CHECK("empty at first", rmdir(file) == -1 && errno == ENOENT);
  struct statfs sf;
  CHECK("statfs: TMPFS_MAGIC", statfs(dir, &sf) == 0 && sf.f_type == 0x01021994);
  CHECK("statfs: 64 KiB of blocks", (unsigned long long)sf.f_blocks * sf.f_bsize == 65536);
  CHECK("listed in /proc/self/mounts", in_mounts(dir) == 1);

  int fd = open(file, O_CREAT | O_RDWR, 0644);
  CHECK("create a file inside", fd >= 0 && write(fd, "hello", 5) == 5);
  char buf[8] = {0};
  CHECK("read it back", pread(fd, buf, 5, 0) == 5 && memcmp(buf, "hello", 5) == 0);
  CHECK_ERRNO("umount2 while a file is open: EBUSY", umount2(dir, 0), EBUSY);
  close(fd);

  int b = open(big, O_CREAT | O_WRONLY, 0644);
  static char chunk[16384];
  memset(chunk, 'x', sizeof chunk);
  long total = 0;
  ssize_t w = 0;
  while ((w = write(b, chunk, sizeof chunk)) > 0) total += w;
  CHECK("writes stop at the size limit with ENOSPC", w == -1 && errno == ENOSPC);
  CHECK("about 64 KiB went in", total > 32768 && total <= 65536);
  close(b);
  unlink(big);

  CHECK("remount read-only", mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, NULL) == 0);
  CHECK_ERRNO("create on a read-only mount: EROFS", open(big, O_CREAT | O_WRONLY, 0644), EROFS);
  CHECK("remount read-write", mount(NULL, dir, NULL, MS_REMOUNT, NULL) == 0);
  fd = open(big, O_CREAT | O_WRONLY, 0644);
  CHECK("create after the remount", fd >= 0);
  if (fd >= 0) close(fd);

  CHECK_ERRNO("unknown filesystem type: ENODEV",
              mount("x", dir, "nosuchfs_sbx", 0, NULL), ENODEV);
  CHECK_ERRNO("mount on a file: ENOTDIR", mount("x", file, "tmpfs", 0, NULL), ENOTDIR);
  CHECK_ERRNO("bad tmpfs option: EINVAL", mount("x", dir, "tmpfs", 0, "bogus=1"), EINVAL);

  CHECK("umount2", umount2(dir, 0) == 0);
  CHECK("the files are gone with it", access(file, F_OK) == -1 && errno == ENOENT);
  CHECK("no longer in /proc/self/mounts", in_mounts(dir) == 0);
  CHECK("the mountpoint's own mode again", stat(dir, &st) == 0 && st.st_dev == before.st_dev);

  /* Lazy detach: an open file keeps working. */
  CHECK("mount again", mount("none", dir, "tmpfs", 0, NULL) == 0);
  /* Without size=, a tmpfs is half of MemTotal, with as many inodes as
   * half of its pages; size=25% a quarter. */
  unsigned long long mem_kb = mem_total_kb();
  CHECK("statfs: no size= is half of MemTotal",
        statfs(dir, &sf) == 0 && mem_kb > 0 &&
            (unsigned long long)sf.f_blocks == mem_kb / 4 / 2 &&
            sf.f_bfree == sf.f_blocks && sf.f_bavail == sf.f_blocks &&
            (unsigned long long)sf.f_files == mem_kb / 4 / 2);
  fd = open(file, O_CREAT | O_RDWR, 0644);
  CHECK("umount2 MNT_DETACH with a file open", fd >= 0 && umount2(dir, MNT_DETACH) == 0);
  CHECK("the open file still works", write(fd, "abc", 3) == 3 && pread(fd, buf, 3, 0) == 3);
  CHECK("but the path is the directory below", access(file, F_OK) == -1 && errno == ENOENT);
  close(fd);

  CHECK("size=25%", mount("q", dir, "tmpfs", 0, "size=25%") == 0 &&
                        statfs(dir, &sf) == 0 &&
                        (unsigned long long)sf.f_blocks == (mem_kb / 4 * 25 + 99) / 100);
  CHECK("umount size=25%", umount2(dir, 0) == 0);

  /* Stacked mounts come off one at a time. */
  CHECK("mount twice on one directory", mount("a", dir, "tmpfs", 0, "mode=0701") == 0 &&
                                        mount("b", dir, "tmpfs", 0, "mode=0702") == 0);
  CHECK("the top one is seen", stat(dir, &st) == 0 && (st.st_mode & 07777) == 0702);
  CHECK("umount the top", umount2(dir, 0) == 0 && stat(dir, &st) == 0 &&
                              (st.st_mode & 07777) == 0701);
  CHECK("umount the other", umount2(dir, 0) == 0);
  CHECK("rmdir the mountpoint", rmdir(dir) == 0);
  return finish();
}
