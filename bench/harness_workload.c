/* harness_workload: one sandbox's workload for the many-sandbox harness
 * (bench/harness.sh; see bench/README.md, "bench/harness.sh: many
 * sandboxes under a CPU quota").
 *
 *   harness_workload calibrate
 *       prints `ns_per_unit X` (CPU time of one work unit) and
 *       `ns_per_getppid Y` (CPU time of one raw getppid, kernel included),
 *       each the minimum of several CLOCK_THREAD_CPUTIME_ID measurements.
 *       Run natively, once, by the harness.
 *   harness_workload WORKLOAD NS_PER_UNIT T1 T2
 *       runs WORKLOAD until one second after the CLOCK_REALTIME instant T2
 *       (ns since the epoch) and prints `units_t1 A` and `units_t2 B`: the
 *       work units done by T1 and by T2 (so B - A were done in the window
 *       [T1, T2]).
 *
 * Workloads (one thread each):
 *   burner      50 ms of work every 200 ms
 *   tick1ms     ~20 µs of work every 1 ms
 *   tick10ms    ~20 µs of work every 10 ms
 *   sparse50ms  ~100 µs of work every 50 ms
 *   getppid     raw getppid calls back to back; one call = one unit
 *
 * "Work" is counted, not timed: a unit is a fixed run of a calibrated
 * integer loop (no system calls, no memory traffic), so the workload's own
 * CPU is units x the native calibration, and measuring it costs nothing in
 * any kernel. Ticks are absolute (clock_nanosleep TIMER_ABSTIME); a tick
 * that is late (CPU quota exhausted) is not made up for: the next one starts
 * at once and the schedule moves on from there. The time is read through
 * the vDSO (no trap in the sentry) after each batch of at most ~1 ms of
 * work, so a counter is at most one batch off its instant.
 *
 * T1 and T2 are absolute so that every sandbox of a run, started one after
 * the other, measures the same window as the harness's cgroup samples. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One work unit: kUnitIters steps of xorshift64 (~1 µs on the dev VM). */
enum { kUnitIters = 1000 };
static volatile uint64_t g_sink;

static void work_units(long n) {
  uint64_t x = g_sink | 1;
  for (long u = 0; u < n; u++) {
    for (int i = 0; i < kUnitIters; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
  }
  g_sink = x;
}

static inline long raw_getppid(void) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(110L) : "rcx", "r11", "memory");
  return ret;
}

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU ns per unit of fn(n), the minimum of `tries` runs of n units. */
static double calibrate_one(void (*fn)(long), long n, int tries) {
  double best = 0;
  for (int t = 0; t < tries; t++) {
    int64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    fn(n);
    double per = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / (double)n;
    if (t == 0 || per < best) best = per;
  }
  return best;
}

static void getppid_units(long n) {
  long sink = 0;
  for (long i = 0; i < n; i++) sink += raw_getppid();
  g_sink += (uint64_t)sink;
}

struct workload {
  const char *name;
  int64_t period_ns; /* 0: no ticks, work back to back */
  int64_t work_ns;   /* work per tick */
};

static const struct workload kWorkloads[] = {
    {"burner", 200000000, 50000000},
    {"tick1ms", 1000000, 20000},
    {"tick10ms", 10000000, 20000},
    {"sparse50ms", 50000000, 100000},
    {"getppid", 0, 0},
};

/* The counters at the two instants, filled in as the instants pass. */
struct window {
  int64_t t1, t2; /* CLOCK_MONOTONIC */
  long units, at_t1, at_t2;
  int have_t1, have_t2;
};

/* Records the counters whose instant has passed; returns 1 once the
 * workload may exit: kLingerNs after T2, so that the harness, sampling the
 * cgroup's threads at T2, still finds them all. */
static const int64_t kLingerNs = 1000000000;
static int check_window(struct window *w) {
  int64_t now = now_ns(CLOCK_MONOTONIC);
  if (!w->have_t1 && now >= w->t1) {
    w->at_t1 = w->units;
    w->have_t1 = 1;
  }
  if (!w->have_t2 && now >= w->t2) {
    w->at_t2 = w->units;
    w->have_t2 = 1;
  }
  return now >= w->t2 + kLingerNs;
}

static void run_getppid(struct window *w) {
  enum { kBatch = 256 };
  do {
    getppid_units(kBatch);
    w->units += kBatch;
  } while (!check_window(w));
}

static void run_ticks(const struct workload *wl, double ns_per_unit, struct window *w) {
  long per_tick = (long)((double)wl->work_ns / ns_per_unit + 0.5);
  if (per_tick < 1) per_tick = 1;
  /* Batches of ~1 ms of work between clock reads. */
  long batch = (long)(1000000.0 / ns_per_unit);
  if (batch < 1) batch = 1;
  int64_t next = now_ns(CLOCK_MONOTONIC);
  for (;;) {
    for (long done = 0; done < per_tick;) {
      long n = per_tick - done < batch ? per_tick - done : batch;
      work_units(n);
      done += n;
      w->units += n;
      if (check_window(w)) return;
    }
    next += wl->period_ns;
    int64_t now = now_ns(CLOCK_MONOTONIC);
    if (next <= now) {
      next = now; /* late: start the next tick at once, do not catch up */
      continue;
    }
    struct timespec ts = {.tv_sec = next / 1000000000, .tv_nsec = next % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
    if (check_window(w)) return;
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "calibrate") == 0) {
    work_units(2000); /* warm up the CPU's clock */
    printf("ns_per_unit %.2f\n", calibrate_one(work_units, 20000, 7));
    printf("ns_per_getppid %.2f\n", calibrate_one(getppid_units, 200000, 7));
    return 0;
  }
  if (argc != 5) {
    fprintf(stderr,
            "usage: %s calibrate\n"
            "       %s burner|tick1ms|tick10ms|sparse50ms|getppid NS_PER_UNIT T1 T2\n",
            argv[0], argv[0]);
    return 2;
  }
  const struct workload *wl = NULL;
  for (size_t i = 0; i < sizeof(kWorkloads) / sizeof(kWorkloads[0]); i++) {
    if (strcmp(argv[1], kWorkloads[i].name) == 0) wl = &kWorkloads[i];
  }
  double ns_per_unit = atof(argv[2]);
  int64_t t1 = atoll(argv[3]), t2 = atoll(argv[4]);
  if (wl == NULL || ns_per_unit <= 0 || t1 <= 0 || t2 < t1) {
    fprintf(stderr, "%s: bad workload or arguments\n", argv[0]);
    return 2;
  }
  /* The instants in CLOCK_MONOTONIC, which the ticks use. */
  int64_t offset = now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC);
  struct window w = {.t1 = t1 - offset, .t2 = t2 - offset};
  if (wl->period_ns == 0) {
    run_getppid(&w);
  } else {
    run_ticks(wl, ns_per_unit, &w);
  }
  printf("units_t1 %ld\nunits_t2 %ld\n", w.at_t1, w.at_t2);
  return 0;
}
