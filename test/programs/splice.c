/* sendfile, splice, tee, vmsplice and copy_file_range: data, offsets,
 * partial transfers and the error cases. Files live in a fresh directory
 * under /tmp. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"

static char dir[64];

static int make_file(const char* name, const char* data) {
  char path[128];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (data != NULL) write(fd, data, strlen(data));
  lseek(fd, 0, SEEK_SET);
  return fd;
}

static ssize_t cfr(int in, loff_t* ioff, int out, loff_t* ooff, size_t len,
                   unsigned flags) {
  return syscall(SYS_copy_file_range, in, ioff, out, ooff, len, flags);
}

static void test_sendfile(void) {
  int in = make_file("sf_in", "0123456789abcdef");
  int p[2];
  pipe(p);
  off_t off = 4;
  CHECK("sendfile with offset", sendfile(p[1], in, &off, 6) == 6);
  CHECK("sendfile offset advanced", off == 10);
  CHECK("sendfile file position untouched", lseek(in, 0, SEEK_CUR) == 0);
  char buf[64] = {0};
  read(p[0], buf, sizeof(buf));
  CHECK("sendfile data", strcmp(buf, "456789") == 0);

  CHECK("sendfile from position", sendfile(p[1], in, NULL, 3) == 3);
  CHECK("sendfile position advanced", lseek(in, 0, SEEK_CUR) == 3);
  memset(buf, 0, sizeof(buf));
  read(p[0], buf, sizeof(buf));
  CHECK("sendfile position data", strcmp(buf, "012") == 0);

  /* To a regular file and to a socket. */
  int out = make_file("sf_out", NULL);
  off = 10;
  CHECK("sendfile to file short at EOF", sendfile(out, in, &off, 100) == 6);
  memset(buf, 0, sizeof(buf));
  pread(out, buf, sizeof(buf), 0);
  CHECK("sendfile file data", strcmp(buf, "abcdef") == 0);
  off = 16;
  CHECK("sendfile at EOF returns 0", sendfile(out, in, &off, 10) == 0);
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  off = 0;
  CHECK("sendfile to socket", sendfile(sv[0], in, &off, 16) == 16);
  memset(buf, 0, sizeof(buf));
  CHECK("sendfile socket data",
        read(sv[1], buf, sizeof(buf)) == 16 &&
            strcmp(buf, "0123456789abcdef") == 0);

  /* Errors. */
  CHECK_ERRNO("sendfile bad in fd", sendfile(p[1], 99, NULL, 1), EBADF);
  CHECK_ERRNO("sendfile in not readable", sendfile(out, p[1], NULL, 1), EBADF);
  CHECK_ERRNO("sendfile out not writable", sendfile(p[0], in, NULL, 1), EBADF);
  off = -1;
  CHECK_ERRNO("sendfile negative offset", sendfile(out, in, &off, 1), EINVAL);
  int app = open(".", O_RDONLY);
  close(app);
  char path[128];
  snprintf(path, sizeof(path), "%s/sf_out", dir);
  app = open(path, O_WRONLY | O_APPEND);
  CHECK_ERRNO("sendfile to O_APPEND", sendfile(app, in, NULL, 1), EINVAL);
  write(sv[1], "abc", 3);
  CHECK_ERRNO("sendfile from a socket", sendfile(out, sv[0], NULL, 3), EINVAL);
  off = 0;
  CHECK_ERRNO("sendfile from a socket with offset",
              sendfile(out, sv[0], &off, 3), ESPIPE);
  write(p[1], "xyz", 3);
  CHECK_ERRNO("sendfile from a pipe", sendfile(out, p[0], NULL, 3), EINVAL);
  close(app);
  close(in);
  close(out);
  close(p[0]);
  close(p[1]);
  close(sv[0]);
  close(sv[1]);
}

static void test_splice(void) {
  int in = make_file("sp_in", "hello splice world");
  int p[2];
  pipe(p);
  loff_t off = 6;
  CHECK("splice file->pipe", splice(in, &off, p[1], NULL, 6, 0) == 6);
  CHECK("splice file->pipe offset advanced", off == 12);
  CHECK("splice file position untouched", lseek(in, 0, SEEK_CUR) == 0);
  CHECK("splice file->pipe from position", splice(in, NULL, p[1], NULL, 5,
                                                   SPLICE_F_MORE | SPLICE_F_MOVE) == 5);
  CHECK("splice position advanced", lseek(in, 0, SEEK_CUR) == 5);

  int out = make_file("sp_out", NULL);
  loff_t ooff = 2;
  CHECK("splice pipe->file takes what is there",
        splice(p[0], NULL, out, &ooff, 100, 0) == 11);
  CHECK("splice pipe->file offset", ooff == 13);
  char buf[64] = {0};
  CHECK("splice pipe->file data",
        pread(out, buf, sizeof(buf), 0) == 13 &&
            memcmp(buf, "\0\0splicehello", 13) == 0);

  /* pipe <-> pipe, pipe <-> socket. */
  int q[2];
  pipe(q);
  write(p[1], "abcdef", 6);
  CHECK("splice pipe->pipe", splice(p[0], NULL, q[1], NULL, 4, 0) == 4);
  memset(buf, 0, sizeof(buf));
  CHECK("splice pipe->pipe data", read(q[0], buf, sizeof(buf)) == 4 &&
                                      strcmp(buf, "abcd") == 0);
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  CHECK("splice pipe->socket", splice(p[0], NULL, sv[0], NULL, 10, 0) == 2);
  write(sv[0], "sock", 4);
  CHECK("splice socket->pipe", splice(sv[1], NULL, q[1], NULL, 10, 0) == 6);
  memset(buf, 0, sizeof(buf));
  CHECK("splice socket->pipe data", read(q[0], buf, sizeof(buf)) == 6 &&
                                        strcmp(buf, "efsock") == 0);

  /* Nonblocking and EOF. */
  int e[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, e);
  CHECK_ERRNO("splice from an empty socket, nonblock",
              splice(e[0], NULL, q[1], NULL, 10, SPLICE_F_NONBLOCK), EAGAIN);
  close(e[0]);
  close(e[1]);
  CHECK_ERRNO("splice empty pipe nonblock",
              splice(p[0], NULL, out, NULL, 10, SPLICE_F_NONBLOCK), EAGAIN);
  fcntl(q[1], F_SETPIPE_SZ, 4096);
  char big[8192];
  memset(big, 'x', sizeof(big));
  write(p[1], big, 4096);
  CHECK("splice into a small pipe is partial",
        splice(p[0], NULL, q[1], NULL, 4096, 0) == 4096);
  write(p[1], big, 10);
  CHECK_ERRNO("splice into a full pipe nonblock",
              splice(p[0], NULL, q[1], NULL, 10, SPLICE_F_NONBLOCK), EAGAIN);
  CHECK("splice left the data in the source pipe",
        read(p[0], big, sizeof(big)) == 10);
  close(p[1]);
  CHECK("splice at EOF returns 0", splice(p[0], NULL, out, NULL, 10, 0) == 0);

  /* Errors. */
  pipe(p);
  CHECK_ERRNO("splice no pipe", splice(in, NULL, out, NULL, 1, 0), EINVAL);
  off = 0;
  CHECK_ERRNO("splice offset on pipe in",
              splice(p[0], &off, out, NULL, 1, 0), ESPIPE);
  CHECK_ERRNO("splice offset on pipe out",
              splice(in, NULL, p[1], &off, 1, 0), ESPIPE);
  CHECK_ERRNO("splice offset on socket",
              splice(p[0], NULL, sv[0], &off, 1, 0), EINVAL);
  CHECK_ERRNO("splice same pipe", splice(p[0], NULL, p[1], NULL, 1, 0),
              EINVAL);
  CHECK_ERRNO("splice bad flags", splice(in, NULL, p[1], NULL, 1, 0x100),
              EINVAL);
  CHECK_ERRNO("splice bad fd", splice(99, NULL, p[1], NULL, 1, 0), EBADF);
  CHECK_ERRNO("splice from write end", splice(p[1], NULL, out, NULL, 1, 0),
              EBADF);
  off = -5;
  CHECK_ERRNO("splice negative offset", splice(in, &off, p[1], NULL, 1, 0),
              EINVAL);
  CHECK("splice len 0", splice(in, NULL, p[1], NULL, 0, 0) == 0);
  /* EPIPE (and SIGPIPE) into a pipe without readers. */
  signal(SIGPIPE, SIG_IGN);
  close(p[0]);
  CHECK_ERRNO("splice to pipe without readers",
              splice(in, NULL, p[1], NULL, 1, 0), EPIPE);
  close(p[1]);
  close(q[0]);
  close(q[1]);
  close(sv[0]);
  close(sv[1]);
  close(in);
  close(out);
}

static void test_tee_vmsplice(void) {
  int p[2], q[2];
  pipe(p);
  pipe(q);
  write(p[1], "teedata", 7);
  CHECK("tee", tee(p[0], q[1], 3, 0) == 3);
  char buf[32] = {0};
  CHECK("tee copied", read(q[0], buf, sizeof(buf)) == 3 &&
                          strcmp(buf, "tee") == 0);
  CHECK("tee again copies the same data", tee(p[0], q[1], 100, 0) == 7);
  memset(buf, 0, sizeof(buf));
  CHECK("tee data", read(q[0], buf, sizeof(buf)) == 7 &&
                        strcmp(buf, "teedata") == 0);
  memset(buf, 0, sizeof(buf));
  CHECK("tee did not consume", read(p[0], buf, sizeof(buf)) == 7 &&
                                   strcmp(buf, "teedata") == 0);
  CHECK_ERRNO("tee empty nonblock", tee(p[0], q[1], 1, SPLICE_F_NONBLOCK),
              EAGAIN);
  int fd = make_file("tee_file", "x");
  CHECK_ERRNO("tee needs pipes", tee(fd, q[1], 1, 0), EINVAL);
  CHECK_ERRNO("tee same pipe", tee(p[0], p[1], 1, 0), EINVAL);

  struct iovec iov[2] = {{"vm", 2}, {"splice", 6}};
  CHECK("vmsplice to pipe", vmsplice(p[1], iov, 2, 0) == 8);
  memset(buf, 0, sizeof(buf));
  CHECK("vmsplice data", read(p[0], buf, sizeof(buf)) == 8 &&
                             strcmp(buf, "vmsplice") == 0);
  write(p[1], "back", 4);
  char out[8] = {0};
  struct iovec riov = {out, sizeof(out)};
  CHECK("vmsplice from pipe", vmsplice(p[0], &riov, 1, 0) == 4 &&
                                  strcmp(out, "back") == 0);
  CHECK_ERRNO("vmsplice not a pipe", vmsplice(fd, iov, 1, 0), EBADF);
  CHECK_ERRNO("vmsplice bad flags", vmsplice(p[1], iov, 1, 0x100), EINVAL);
  close(fd);
  close(p[0]);
  close(p[1]);
  close(q[0]);
  close(q[1]);
}

static void test_copy_file_range(void) {
  int in = make_file("cfr_in", "copy file range data");
  int out = make_file("cfr_out", "XXXXXXXXXXXX");
  loff_t ioff = 5, ooff = 2;
  CHECK("copy_file_range with offsets", cfr(in, &ioff, out, &ooff, 4, 0) == 4);
  CHECK("copy_file_range offsets advanced", ioff == 9 && ooff == 6);
  CHECK("copy_file_range positions untouched",
        lseek(in, 0, SEEK_CUR) == 0 && lseek(out, 0, SEEK_CUR) == 0);
  char buf[64] = {0};
  pread(out, buf, sizeof(buf), 0);
  CHECK("copy_file_range data", strcmp(buf, "XXfileXXXXXX") == 0);
  CHECK("copy_file_range from positions", cfr(in, NULL, out, NULL, 4, 0) == 4);
  CHECK("copy_file_range positions advanced",
        lseek(in, 0, SEEK_CUR) == 4 && lseek(out, 0, SEEK_CUR) == 4);
  ioff = 15;
  ooff = 20;
  CHECK("copy_file_range short at EOF, extends the output",
        cfr(in, &ioff, out, &ooff, 100, 0) == 5);
  struct stat st;
  fstat(out, &st);
  CHECK("copy_file_range output size", st.st_size == 25);
  ioff = 100;
  CHECK("copy_file_range past EOF", cfr(in, &ioff, out, NULL, 5, 0) == 0);

  /* Errors. */
  CHECK_ERRNO("copy_file_range flags", cfr(in, NULL, out, NULL, 1, 1), EINVAL);
  int p[2];
  pipe(p);
  CHECK_ERRNO("copy_file_range pipe", cfr(p[0], NULL, out, NULL, 1, 0), EINVAL);
  int d = open(dir, O_RDONLY | O_DIRECTORY);
  CHECK_ERRNO("copy_file_range dir", cfr(d, NULL, out, NULL, 1, 0), EISDIR);
  CHECK_ERRNO("copy_file_range bad fd", cfr(99, NULL, out, NULL, 1, 0), EBADF);
  char path[128];
  snprintf(path, sizeof(path), "%s/cfr_out", dir);
  int ro = open(path, O_RDONLY);
  CHECK_ERRNO("copy_file_range out read-only", cfr(in, NULL, ro, NULL, 1, 0),
              EBADF);
  int app = open(path, O_WRONLY | O_APPEND);
  CHECK_ERRNO("copy_file_range out O_APPEND", cfr(in, NULL, app, NULL, 1, 0),
              EBADF);
  ioff = 0;
  ooff = 2;
  CHECK_ERRNO("copy_file_range overlapping",
              cfr(in, &ioff, in, &ooff, 4, 0), EINVAL);
  ioff = -5;
  CHECK_ERRNO("copy_file_range negative offset",
              cfr(in, &ioff, out, NULL, 1, 0), EINVAL);
  ioff = -1;
  CHECK_ERRNO("copy_file_range offset wraps",
              cfr(in, &ioff, out, NULL, 1, 0), EOVERFLOW);
  /* Across filesystems (/tmp to /dev/shm): EXDEV, as Linux >= 5.19 for
   * filesystems without their own copy_file_range (tmpfs, ext4). */
  int shm = open("/dev/shm/sbx_cfr_test", O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (shm >= 0) {
    ioff = 0;
    CHECK_ERRNO("copy_file_range across filesystems",
                cfr(in, &ioff, shm, NULL, 4, 0), EXDEV);
    unlink("/dev/shm/sbx_cfr_test");
    close(shm);
  } else {
    printf("copy_file_range across filesystems: ok (EXDEV)\n");
  }
  close(ro);
  close(app);
  close(d);
  close(p[0]);
  close(p[1]);
  close(in);
  close(out);
}

static void cleanup(void) {
  const char* names[] = {"sf_in", "sf_out", "sp_in", "sp_out", "tee_file",
                         "cfr_in", "cfr_out"};
  char path[128];
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  strcpy(dir, "/tmp/sbx_splice_XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  test_sendfile();
  test_splice();
  test_tee_vmsplice();
  test_copy_file_range();
  cleanup();
  return finish();
}
