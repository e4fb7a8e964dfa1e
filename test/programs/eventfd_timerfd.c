/* eventfd(2) and timerfd_create(2): counter and semaphore semantics,
 * overflow, argument errors, blocking reads woken by another thread, timer
 * expirations (one-shot, periodic, absolute, disarmed), settime/gettime,
 * and both files under poll. Times are only compared, never printed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static long ms_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

static uint64_t rd(int fd, long *ret) {
  uint64_t v = 0;
  *ret = read(fd, &v, sizeof v);
  return v;
}
static long wr(int fd, uint64_t v) { return write(fd, &v, sizeof v); }

static void *delayed_add(void *arg) {
  sleep_ms(50);
  wr(*(int *)arg, 3);
  return NULL;
}

static void test_eventfd(void) {
  long r;
  int fd = eventfd(5, 0);
  CHECK("eventfd_create", fd >= 0);
  CHECK("eventfd_flags", fcntl(fd, F_GETFL) == O_RDWR && fcntl(fd, F_GETFD) == 0);
  CHECK("eventfd_initval", rd(fd, &r) == 5 && r == 8);
  CHECK("eventfd_add", wr(fd, 3) == 8 && wr(fd, 4) == 8);
  CHECK("eventfd_sum", rd(fd, &r) == 7 && r == 8);
  char small[4];
  CHECK_ERRNO("eventfd_short_read", read(fd, small, 4), EINVAL);
  CHECK_ERRNO("eventfd_short_write", write(fd, small, 4), EINVAL);
  CHECK_ERRNO("eventfd_write_max", wr(fd, UINT64_MAX), EINVAL);
  uint64_t pv;
  CHECK_ERRNO("eventfd_pread", pread(fd, &pv, 8, 0), ESPIPE);
  CHECK("eventfd_lseek", lseek(fd, 0, SEEK_CUR) == 0);

  pthread_t t;
  pthread_create(&t, NULL, delayed_add, &fd);
  CHECK("eventfd_blocking_read_woken", rd(fd, &r) == 3 && r == 8);
  pthread_join(t, NULL);
  close(fd);

  fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK("eventfd_nonblock_flags", fcntl(fd, F_GETFL) == (O_RDWR | O_NONBLOCK) &&
                                      fcntl(fd, F_GETFD) == FD_CLOEXEC);
  uint64_t v;
  CHECK_ERRNO("eventfd_nonblock_empty", read(fd, &v, 8), EAGAIN);
  struct pollfd pf = {fd, POLLIN | POLLOUT, 0};
  CHECK("eventfd_poll_zero", poll(&pf, 1, 0) == 1 && pf.revents == POLLOUT);
  CHECK("eventfd_fill", wr(fd, 0xfffffffffffffffeull) == 8);
  CHECK("eventfd_poll_full", poll(&pf, 1, 0) == 1 && pf.revents == POLLIN);
  CHECK_ERRNO("eventfd_overflow", wr(fd, 1), EAGAIN);
  CHECK("eventfd_zero_write_when_full", wr(fd, 0) == 8);
  CHECK("eventfd_drain_full", rd(fd, &r) == 0xfffffffffffffffeull);
  close(fd);

  fd = eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK);
  int ok = 1;
  for (int i = 0; i < 3; i++) ok &= rd(fd, &r) == 1 && r == 8;
  CHECK("eventfd_semaphore", ok);
  CHECK_ERRNO("eventfd_semaphore_empty", read(fd, &v, 8), EAGAIN);
  close(fd);

  CHECK_ERRNO("eventfd_bad_flags", eventfd(0, 0x1234), EINVAL);
}

static void test_timerfd_basic(void) {
  CHECK_ERRNO("timerfd_bad_clock", timerfd_create(12345, 0), EINVAL);
  CHECK_ERRNO("timerfd_bad_flags", timerfd_create(CLOCK_MONOTONIC, 0x4), EINVAL);
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  CHECK("timerfd_create", fd >= 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC &&
                              fcntl(fd, F_GETFL) == O_RDWR);
  struct itimerspec cur;
  CHECK("timerfd_gettime_disarmed", timerfd_gettime(fd, &cur) == 0 &&
                                        cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec == 0 &&
                                        cur.it_interval.tv_sec == 0 &&
                                        cur.it_interval.tv_nsec == 0);
  struct itimerspec its = {{0, 0}, {0, 60 * 1000000}};
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  CHECK("timerfd_settime", timerfd_settime(fd, 0, &its, NULL) == 0);
  CHECK("timerfd_gettime_armed", timerfd_gettime(fd, &cur) == 0 && cur.it_value.tv_sec == 0 &&
                                     cur.it_value.tv_nsec > 0 &&
                                     cur.it_value.tv_nsec <= 60 * 1000000);
  long r;
  uint64_t n = rd(fd, &r);
  long waited = ms_since(&start);
  CHECK("timerfd_oneshot_read", r == 8 && n == 1);
  CHECK("timerfd_oneshot_waited", waited >= 55);
  CHECK("timerfd_oneshot_disarmed", timerfd_gettime(fd, &cur) == 0 && cur.it_value.tv_sec == 0 &&
                                        cur.it_value.tv_nsec == 0);
  char small[4];
  CHECK_ERRNO("timerfd_short_read", read(fd, small, 4), EINVAL);
  CHECK_ERRNO("timerfd_write", write(fd, "12345678", 8), EINVAL);

  /* Non-blocking before expiry, then poll until it fires. */
  fcntl(fd, F_SETFL, O_NONBLOCK);
  its.it_value.tv_nsec = 40 * 1000000;
  timerfd_settime(fd, 0, &its, NULL);
  uint64_t v;
  CHECK_ERRNO("timerfd_nonblock_early", read(fd, &v, 8), EAGAIN);
  struct pollfd pf = {fd, POLLIN, 0};
  CHECK("timerfd_poll_not_yet", poll(&pf, 1, 0) == 0);
  CHECK("timerfd_poll_fires", poll(&pf, 1, 5000) == 1 && pf.revents == POLLIN);
  CHECK("timerfd_read_after_poll", rd(fd, &r) == 1);

  /* Disarming loses the pending expirations count too. */
  its.it_value.tv_nsec = 1000000;
  timerfd_settime(fd, 0, &its, NULL);
  sleep_ms(30);
  struct itimerspec zero = {{0, 0}, {0, 0}}, old;
  CHECK("timerfd_disarm", timerfd_settime(fd, 0, &zero, &old) == 0 &&
                              old.it_value.tv_sec == 0 && old.it_value.tv_nsec == 0);
  CHECK_ERRNO("timerfd_disarm_resets_count", read(fd, &v, 8), EAGAIN);

  struct itimerspec bad = {{0, 0}, {0, 1000000000}};
  CHECK_ERRNO("timerfd_bad_timespec", timerfd_settime(fd, 0, &bad, NULL), EINVAL);
  CHECK_ERRNO("timerfd_bad_settime_flags", timerfd_settime(fd, 0x10, &its, NULL), EINVAL);
  int p[2];
  pipe(p);
  CHECK_ERRNO("timerfd_settime_not_timerfd", timerfd_settime(p[0], 0, &its, NULL), EINVAL);
  CHECK_ERRNO("timerfd_gettime_bad_fd", timerfd_gettime(999, &cur), EBADF);
  close(p[0]);
  close(p[1]);
  close(fd);
}

static void test_timerfd_periodic(void) {
  int fd = timerfd_create(CLOCK_MONOTONIC, 0);
  struct itimerspec its = {{0, 10 * 1000000}, {0, 10 * 1000000}};
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  timerfd_settime(fd, 0, &its, NULL);
  long r;
  uint64_t first = rd(fd, &r);
  CHECK("timerfd_periodic_first", first >= 1 && r == 8);
  sleep_ms(105);
  uint64_t n = rd(fd, &r);
  /* Bounded by the time that really passed: a loaded machine oversleeps. */
  long most = ms_since(&start) / 10;
  CHECK("timerfd_periodic_counts", r == 8 && first + n >= 6 && (long)(first + n) <= most);
  struct itimerspec old;
  CHECK("timerfd_old_value", timerfd_settime(fd, 0, &(struct itimerspec){{0, 0}, {0, 0}}, &old) == 0 &&
                                 old.it_interval.tv_sec == 0 &&
                                 old.it_interval.tv_nsec == 10 * 1000000 &&
                                 old.it_value.tv_nsec <= 10 * 1000000);
  close(fd);

  /* Absolute deadlines, on CLOCK_REALTIME and CLOCK_BOOTTIME. */
  static const clockid_t clocks[] = {CLOCK_REALTIME, CLOCK_BOOTTIME};
  static const char *names[] = {"timerfd_abstime_realtime", "timerfd_abstime_boottime"};
  for (int i = 0; i < 2; i++) {
    fd = timerfd_create(clocks[i], 0);
    struct timespec now;
    clock_gettime(clocks[i], &now);
    struct itimerspec abs = {{0, 0}, now};
    abs.it_value.tv_nsec += 30 * 1000000;
    if (abs.it_value.tv_nsec >= 1000000000) {
      abs.it_value.tv_sec++;
      abs.it_value.tv_nsec -= 1000000000;
    }
    timerfd_settime(fd, TFD_TIMER_ABSTIME, &abs, NULL);
    struct timespec after;
    uint64_t n1 = rd(fd, &r);
    clock_gettime(clocks[i], &after);
    int late_enough = after.tv_sec > abs.it_value.tv_sec ||
                      (after.tv_sec == abs.it_value.tv_sec && after.tv_nsec >= abs.it_value.tv_nsec);
    CHECK(names[i], n1 == 1 && late_enough);
    close(fd);
  }

  /* An absolute time in the past expires at once; with an interval, every
   * period since counts. */
  fd = timerfd_create(CLOCK_MONOTONIC, 0);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  struct itimerspec past = {{0, 100 * 1000000}, {now.tv_sec - 1, now.tv_nsec}};
  timerfd_settime(fd, TFD_TIMER_ABSTIME, &past, NULL);
  n = rd(fd, &r);
  CHECK("timerfd_abstime_past_periods", n >= 10 && n <= 13);
  close(fd);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_eventfd();
  test_timerfd_basic();
  test_timerfd_periodic();
  return finish();
}
