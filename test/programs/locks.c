/* Advisory locks in one process: fcntl(2) record locks (POSIX and open file
 * description locks) and flock(2). Conflicts between threads use OFD locks
 * and flock, whose owners are descriptions; POSIX locks all belong to the
 * one process here, so their conflicts are seen from OFD locks (which
 * conflict with POSIX locks even within a process). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#ifndef F_OFD_GETLK
#define F_OFD_GETLK 36
#define F_OFD_SETLK 37
#define F_OFD_SETLKW 38
#endif

static char g_path[64];

static int lk(int fd, int cmd, short type, short whence, off_t start,
              off_t len) {
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = whence;
  fl.l_start = start;
  fl.l_len = len;
  return fcntl(fd, cmd, &fl);
}

/* F_OFD_GETLK / F_GETLK of [start, start+len): fills *out. */
static int getlk(int fd, int cmd, short type, off_t start, off_t len,
                 struct flock* out) {
  memset(out, 0, sizeof(*out));
  out->l_type = type;
  out->l_whence = SEEK_SET;
  out->l_start = start;
  out->l_len = len;
  return fcntl(fd, cmd, out);
}

/* Whether description `fd` sees [start, start+len) free for a write lock. */
static int ofd_free(int fd, off_t start, off_t len) {
  struct flock fl;
  return getlk(fd, F_OFD_GETLK, F_WRLCK, start, len, &fl) == 0 &&
         fl.l_type == F_UNLCK;
}

/* Whether the first conflict `fd` sees over [start, start+len) is
 * exactly want_start/want_len of type want_type. */
static int ofd_sees(int fd, off_t start, off_t len, short want_type,
                    off_t want_start, off_t want_len, pid_t want_pid) {
  struct flock fl;
  if (getlk(fd, F_OFD_GETLK, F_WRLCK, start, len, &fl) != 0) return 0;
  return fl.l_type == want_type && fl.l_whence == SEEK_SET &&
         fl.l_start == want_start && fl.l_len == want_len &&
         fl.l_pid == want_pid;
}

/* ---- blocking between threads ---- */

struct waiter {
  int fd;
  int use_flock;
  volatile int released; /* set by the holder just before it unlocks */
  int saw_released;
  int result;
};

static void* wait_for_lock(void* arg) {
  struct waiter* w = arg;
  if (w->use_flock) {
    w->result = flock(w->fd, LOCK_EX);
  } else {
    w->result = lk(w->fd, F_OFD_SETLKW, F_WRLCK, SEEK_SET, 0, 10);
  }
  w->saw_released = w->released;
  return NULL;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static void on_usr1(int sig) { (void)sig; }

struct interrupter {
  pthread_t target;
  volatile int done;
};

/* Signals the target until it says it is done, so that a signal that
 * arrives before the target blocks does not leave it blocked forever. */
static void* interrupt_later(void* arg) {
  struct interrupter* in = arg;
  while (!in->done) {
    sleep_ms(50);
    if (!in->done) pthread_kill(in->target, SIGUSR1);
  }
  return NULL;
}

int main(void) {
  snprintf(g_path, sizeof(g_path), "/tmp/sbx_locks_test.%d", (int)getpid());
  int fd = open(g_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK("create", fd >= 0);
  char data[100];
  memset(data, 'x', sizeof(data));
  CHECK("fill", write(fd, data, sizeof(data)) == (ssize_t)sizeof(data));
  int other = open(g_path, O_RDWR); /* a second description */
  int third = open(g_path, O_RDWR);
  CHECK("reopen", other >= 0 && third >= 0);
  const pid_t me = getpid();

  /* ---- POSIX locks, seen by their own process and by OFD locks ---- */
  CHECK("posix_setlk", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0);
  struct flock fl;
  CHECK("getlk_own_lock_is_unlck",
        getlk(fd, F_GETLK, F_WRLCK, 0, 10, &fl) == 0 && fl.l_type == F_UNLCK);
  CHECK("getlk_own_lock_other_fd",
        getlk(other, F_GETLK, F_WRLCK, 0, 10, &fl) == 0 &&
            fl.l_type == F_UNLCK);
  CHECK("ofd_getlk_sees_posix_lock_with_pid",
        ofd_sees(other, 5, 1, F_WRLCK, 0, 10, me));
  CHECK_ERRNO("ofd_setlk_conflicts_with_own_posix",
              lk(other, F_OFD_SETLK, F_RDLCK, SEEK_SET, 9, 1), EAGAIN);
  CHECK("posix_relock_same_range",
        lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0);

  /* split */
  CHECK("posix_unlock_middle",
        lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 3, 2) == 0);
  CHECK("split_hole_free", ofd_free(other, 3, 2));
  CHECK("split_left", ofd_sees(other, 0, 4, F_WRLCK, 0, 3, me));
  CHECK("split_right", ofd_sees(other, 4, 6, F_WRLCK, 5, 5, me));
  /* merge */
  CHECK("posix_fill_hole", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 3, 2) == 0);
  CHECK("merged", ofd_sees(other, 3, 1, F_WRLCK, 0, 10, me));
  /* downgrade in the middle */
  CHECK("posix_downgrade_middle",
        lk(fd, F_SETLK, F_RDLCK, SEEK_SET, 4, 2) == 0);
  CHECK("downgraded_readable_by_ofd",
        lk(other, F_OFD_SETLK, F_RDLCK, SEEK_SET, 4, 2) == 0);
  CHECK("downgraded_not_writable",
        getlk(other, F_OFD_GETLK, F_WRLCK, 4, 1, &fl) == 0 &&
            fl.l_type == F_RDLCK && fl.l_start == 4 && fl.l_len == 2);
  CHECK("ofd_unlock", lk(other, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);
  CHECK("posix_unlock_all", lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);
  CHECK("all_free", ofd_free(other, 0, 0));

  /* ranges: l_len 0 to infinity from SEEK_END, negative l_len, SEEK_CUR */
  CHECK("lock_from_end_to_inf",
        lk(fd, F_SETLK, F_WRLCK, SEEK_END, 0, 0) == 0);
  CHECK("seek_end_range", ofd_sees(other, 1000000, 1, F_WRLCK, 100, 0, me));
  CHECK("before_end_free", ofd_free(other, 0, 100));
  CHECK("unlock_from_end", lk(fd, F_SETLK, F_UNLCK, SEEK_END, 0, 0) == 0);
  CHECK("negative_len", lk(fd, F_SETLK, F_RDLCK, SEEK_SET, 50, -10) == 0);
  CHECK("negative_len_range", ofd_sees(other, 0, 0, F_RDLCK, 40, 10, me));
  CHECK("unlock_negative", lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);
  CHECK("seek_cur_lseek", lseek(fd, 60, SEEK_SET) == 60);
  CHECK("seek_cur_lock", lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, -5, 2) == 0);
  CHECK("seek_cur_range", ofd_sees(other, 0, 0, F_WRLCK, 55, 2, me));
  CHECK("seek_cur_unlock", lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);
  CHECK("getlk_seek_cur_reports_seek_set",
        lk(other, F_OFD_SETLK, F_WRLCK, SEEK_SET, 70, 5) == 0 &&
            (memset(&fl, 0, sizeof(fl)), fl.l_type = F_RDLCK,
             fl.l_whence = SEEK_CUR, fl.l_start = 10, fl.l_len = 1,
             fcntl(fd, F_GETLK, &fl) == 0) &&
            fl.l_type == F_WRLCK && fl.l_whence == SEEK_SET &&
            fl.l_start == 70 && fl.l_len == 5 && fl.l_pid == -1);
  CHECK("ofd_unlock_70", lk(other, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);

  /* argument errors */
  CHECK_ERRNO("bad_whence", lk(fd, F_SETLK, F_WRLCK, 7, 0, 1), EINVAL);
  CHECK_ERRNO("bad_type", lk(fd, F_SETLK, 9, SEEK_SET, 0, 1), EINVAL);
  CHECK_ERRNO("getlk_unlck_type",
              getlk(fd, F_GETLK, F_UNLCK, 0, 1, &fl), EINVAL);
  CHECK_ERRNO("negative_start", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, -1, 1),
              EINVAL);
  CHECK_ERRNO("negative_len_before_zero",
              lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 5, -6), EINVAL);
  CHECK_ERRNO("overflow",
              lk(fd, F_SETLK, F_WRLCK, SEEK_SET, INT64_MAX, 2), EOVERFLOW);
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_pid = 1;
  CHECK_ERRNO("ofd_nonzero_pid", fcntl(fd, F_OFD_SETLK, &fl), EINVAL);
  CHECK_ERRNO("getlk_efault", fcntl(fd, F_GETLK, (struct flock*)8), EFAULT);
  int ro = open(g_path, O_RDONLY), wo = open(g_path, O_WRONLY);
  CHECK_ERRNO("wrlck_on_rdonly", lk(ro, F_SETLK, F_WRLCK, SEEK_SET, 0, 1),
              EBADF);
  CHECK_ERRNO("rdlck_on_wronly", lk(wo, F_SETLK, F_RDLCK, SEEK_SET, 0, 1),
              EBADF);
  CHECK("unlck_on_rdonly", lk(ro, F_SETLK, F_UNLCK, SEEK_SET, 0, 1) == 0);
  CHECK("getlk_on_wronly",
        getlk(wo, F_GETLK, F_RDLCK, 0, 1, &fl) == 0 && fl.l_type == F_UNLCK);
  close(ro);
  close(wo);
  int opath = open(g_path, O_PATH);
  CHECK_ERRNO("setlk_on_opath", lk(opath, F_SETLK, F_UNLCK, SEEK_SET, 0, 1),
              EBADF);
  CHECK_ERRNO("flock_on_opath", flock(opath, LOCK_SH), EBADF);
  close(opath);
  CHECK_ERRNO("setlk_bad_fd", lk(-1, F_SETLK, F_WRLCK, SEEK_SET, 0, 1),
              EBADF);

  /* ---- closing any fd of the file drops the process's POSIX locks ---- */
  CHECK("posix_lock_again", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0);
  CHECK("ofd_lock_other", lk(other, F_OFD_SETLK, F_WRLCK, SEEK_SET, 20, 10) ==
                              0);
  int extra = open(g_path, O_RDONLY);
  CHECK("close_extra", extra >= 0 && close(extra) == 0);
  CHECK("posix_gone_after_close_of_other_fd", ofd_free(third, 0, 10));
  CHECK("ofd_kept_after_close", !ofd_free(third, 20, 10));
  /* OFD locks belong to the description: dup shares them, and closing
   * the last fd of the description drops them. */
  int dupfd = dup(other);
  CHECK("dup_shares_ofd",
        lk(dupfd, F_OFD_SETLK, F_WRLCK, SEEK_SET, 20, 10) == 0);
  close(other);
  CHECK("ofd_kept_while_dup_open", !ofd_free(third, 20, 10));
  close(dupfd);
  CHECK("ofd_gone_with_description", ofd_free(third, 20, 10));

  /* ---- OFD locks between descriptions: readers share ---- */
  other = open(g_path, O_RDWR);
  CHECK("ofd_read_a", lk(other, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 10) == 0);
  CHECK("ofd_read_b", lk(third, F_OFD_SETLK, F_RDLCK, SEEK_SET, 5, 10) == 0);
  CHECK_ERRNO("ofd_upgrade_blocked",
              lk(third, F_OFD_SETLK, F_WRLCK, SEEK_SET, 5, 1), EAGAIN);
  CHECK("ofd_upgrade_outside",
        lk(third, F_OFD_SETLK, F_WRLCK, SEEK_SET, 10, 5) == 0);
  CHECK("ofd_getlk_pid_minus_one",
        ofd_sees(other, 12, 1, F_WRLCK, 10, 5, -1));
  CHECK("ofd_unlock_a", lk(other, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);
  CHECK("ofd_unlock_b", lk(third, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0);

  /* ---- F_OFD_SETLKW between threads ---- */
  CHECK("holder_lock", lk(other, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0);
  struct waiter w = {third, 0, 0, 0, -2};
  pthread_t th;
  pthread_create(&th, NULL, wait_for_lock, &w);
  sleep_ms(100);
  w.released = 1;
  lk(other, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 10);
  pthread_join(th, NULL);
  CHECK("setlkw_waited_for_unlock", w.result == 0 && w.saw_released);
  CHECK("setlkw_holds_now", !ofd_free(other, 0, 1));
  lk(third, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0);

  /* a signal interrupts F_OFD_SETLKW (handler without SA_RESTART) */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  CHECK("holder_lock_2", lk(other, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0);
  struct interrupter in = {pthread_self(), 0};
  pthread_create(&th, NULL, interrupt_later, &in);
  int r = lk(third, F_OFD_SETLKW, F_WRLCK, SEEK_SET, 0, 10);
  int e = errno;
  in.done = 1;
  pthread_join(th, NULL);
  errno = e;
  CHECK_ERRNO("setlkw_eintr", r, EINTR);
  lk(other, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0);
  CHECK("eintr_left_no_lock", ofd_free(fd, 0, 0));

  /* ---- flock ---- */
  CHECK("flock_ex", flock(fd, LOCK_EX) == 0);
  CHECK_ERRNO("flock_ex_other_description", flock(other, LOCK_EX | LOCK_NB),
              EWOULDBLOCK);
  CHECK_ERRNO("flock_sh_other_description", flock(other, LOCK_SH | LOCK_NB),
              EWOULDBLOCK);
  dupfd = dup(fd);
  CHECK("flock_dup_same_description", flock(dupfd, LOCK_EX | LOCK_NB) == 0);
  close(dupfd);
  CHECK("flock_and_fcntl_independent",
        lk(other, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0) == 0);
  lk(other, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0);
  CHECK("flock_downgrade", flock(fd, LOCK_SH) == 0);
  CHECK("flock_sh_shared", flock(other, LOCK_SH | LOCK_NB) == 0);
  /* A failed conversion drops the lock it had (flock(2): not atomic). */
  CHECK_ERRNO("flock_upgrade_conflict", flock(fd, LOCK_EX | LOCK_NB),
              EWOULDBLOCK);
  CHECK("flock_failed_upgrade_dropped_lock",
        flock(other, LOCK_EX | LOCK_NB) == 0);
  CHECK("flock_un", flock(other, LOCK_UN) == 0);
  CHECK("flock_un_unlocked", flock(other, LOCK_UN) == 0);
  CHECK_ERRNO("flock_bad_op", flock(fd, 0), EINVAL);
  CHECK_ERRNO("flock_sh_and_ex", flock(fd, LOCK_SH | LOCK_EX), EINVAL);
  CHECK_ERRNO("flock_bad_fd", flock(-1, LOCK_SH), EBADF);
  /* closing the description releases its flock */
  int tmp = open(g_path, O_RDONLY);
  CHECK("flock_tmp", flock(tmp, LOCK_EX | LOCK_NB) == 0);
  close(tmp);
  CHECK("flock_released_on_close", flock(other, LOCK_EX | LOCK_NB) == 0);

  /* blocking flock between threads */
  struct waiter fw = {third, 1, 0, 0, -2};
  pthread_create(&th, NULL, wait_for_lock, &fw);
  sleep_ms(100);
  fw.released = 1;
  flock(other, LOCK_UN);
  pthread_join(th, NULL);
  CHECK("flock_waited_for_unlock", fw.result == 0 && fw.saw_released);
  flock(third, LOCK_UN);

  close(fd);
  close(other);
  close(third);
  CHECK("unlink", unlink(g_path) == 0);
  return finish();
}
