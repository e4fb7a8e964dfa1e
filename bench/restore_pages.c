// The page-loading workload of a restore (DESIGN.md, "Checkpoint and
// restore"; bench/restore_pages.sh drives it through a checkpoint and a
// restore).
//
// Maps a large anonymous region (MAP_POPULATE), writes every page, then
// runs N hot threads that loop on getcpu(2) with both output pointers in
// their own page of the region (two small copies out per call). The main
// thread samples the calls every 50 ms and detects the restore as a gap in
// CLOCK_REALTIME between samples. After it, an optional walker thread calls
// getcpu(2) on one page per 2 MiB of the region (the pages a restore has
// not loaded yet). It reports the hot threads' rate after the restore
// relative to the rate before it, in the 0-5 s and 0-20 s windows, and the
// per-call latency (p50/p99/p99.9, power-of-two buckets) in the first 20 s.
//
// Natively, stopping the process (SIGSTOP, wait, SIGCONT) makes the same
// gap: that is how it is tested without a sandbox.
//
//   bench_restore_pages [--size=MIB] [--threads=N] [--walker]
//                       [--gap-ms=MS] [--max-wait=S] [--after=S]
//     --size     region in MiB (default 4096)
//     --threads  hot threads (default 8)
//     --walker   start the walker after the restore
//     --gap-ms   a sample this late is the restore (default 500)
//     --max-wait seconds to wait for a restore before giving up (600)
//     --after    seconds measured after the restore (default 20)
// Output: "key=value" lines (README.md), then "restore_pages: done".
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096ul
#define BUCKETS 40
#define MAX_THREADS 256
#define MAX_SAMPLES (1 << 16)

struct hot {
  _Alignas(64) _Atomic uint64_t calls;
  _Atomic uint64_t hist[BUCKETS];  // per-call ns, power-of-two buckets
  unsigned* cpu;                   // both in this thread's own page
  unsigned* node;
};

static struct hot hots[MAX_THREADS];
static int nhot = 8;
static _Atomic int stop_all;
static _Atomic int walker_go;
static uint8_t* region;
static uint64_t region_len;
static double walker_seconds = -1;
static uint64_t walker_pages;

static uint64_t now_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int bucket(uint64_t ns) {
  int b = 0;
  while (b + 1 < BUCKETS && (ns >> (b + 1)) != 0) b++;
  return b;
}

static void* hot_main(void* arg) {
  struct hot* h = arg;
  uint64_t t = now_ns(CLOCK_MONOTONIC);
  while (!atomic_load_explicit(&stop_all, memory_order_relaxed)) {
    syscall(SYS_getcpu, h->cpu, h->node, NULL);
    const uint64_t t2 = now_ns(CLOCK_MONOTONIC);
    atomic_fetch_add_explicit(&h->hist[bucket(t2 - t)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->calls, 1, memory_order_relaxed);
    t = t2;
  }
  return NULL;
}

static void* walker_main(void* arg) {
  (void)arg;
  while (!atomic_load(&walker_go)) {
    if (atomic_load(&stop_all)) return NULL;
    usleep(1000);
  }
  const uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  for (uint64_t off = 0; off + PAGE <= region_len; off += 2ul << 20) {
    unsigned* p = (unsigned*)(region + off + 64);
    syscall(SYS_getcpu, p, p + 1, NULL);
    walker_pages++;
  }
  walker_seconds = (now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
  return NULL;
}

struct sample {
  uint64_t wall, mono, calls;
};
static struct sample samples[MAX_SAMPLES];

static uint64_t total_calls(void) {
  uint64_t s = 0;
  for (int i = 0; i < nhot; i++) s += atomic_load(&hots[i].calls);
  return s;
}

static void snapshot_hist(uint64_t* out) {
  memset(out, 0, sizeof(uint64_t) * BUCKETS);
  for (int i = 0; i < nhot; i++) {
    for (int b = 0; b < BUCKETS; b++) out[b] += atomic_load(&hots[i].hist[b]);
  }
}

// The upper bound of the bucket holding quantile q, in ns.
static uint64_t quantile(const uint64_t* h, double q) {
  uint64_t n = 0;
  for (int b = 0; b < BUCKETS; b++) n += h[b];
  if (n == 0) return 0;
  uint64_t want = (uint64_t)(q * (double)n), seen = 0;
  for (int b = 0; b < BUCKETS; b++) {
    seen += h[b];
    if (seen > want) return 2ull << b;
  }
  return 2ull << (BUCKETS - 1);
}

// Calls per second between samples i and j (monotonic time).
static double rate(int i, int j) {
  if (j <= i) return 0;
  const double s = (samples[j].mono - samples[i].mono) / 1e9;
  return s > 0 ? (samples[j].calls - samples[i].calls) / s : 0;
}

int main(int argc, char** argv) {
  uint64_t size_mib = 4096, gap_ms = 500, max_wait = 600, after = 20;
  int walker = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (!strncmp(a, "--size=", 7)) size_mib = strtoull(a + 7, NULL, 0);
    else if (!strncmp(a, "--threads=", 10)) nhot = atoi(a + 10);
    else if (!strcmp(a, "--walker")) walker = 1;
    else if (!strncmp(a, "--gap-ms=", 9)) gap_ms = strtoull(a + 9, NULL, 0);
    else if (!strncmp(a, "--max-wait=", 11)) max_wait = strtoull(a + 11, NULL, 0);
    else if (!strncmp(a, "--after=", 8)) after = strtoull(a + 8, NULL, 0);
    else {
      fprintf(stderr, "restore_pages: unknown argument %s\n", a);
      return 2;
    }
  }
  if (nhot < 1 || nhot > MAX_THREADS || size_mib < 4 || after < 5) {
    fprintf(stderr, "restore_pages: bad --threads, --size or --after\n");
    return 2;
  }
  region_len = size_mib << 20;
  region = mmap(NULL, region_len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (region == MAP_FAILED) {
    fprintf(stderr, "restore_pages: mmap of %llu MiB: %s\n",
            (unsigned long long)size_mib, strerror(errno));
    return 1;
  }
  // Every page non-zero: all of it is in the image.
  for (uint64_t off = 0; off < region_len; off += PAGE) {
    region[off] = (uint8_t)(1 + off / PAGE % 251);
  }
  // Hot thread i's page: spread over the region, away from the walker's
  // pages (offset 64 of each 2 MiB).
  const uint64_t stride = region_len / (uint64_t)(nhot + 1) & ~(PAGE - 1);
  pthread_t th[MAX_THREADS + 1];
  for (int i = 0; i < nhot; i++) {
    uint8_t* page = region + stride * (uint64_t)(i + 1) + PAGE;
    hots[i].cpu = (unsigned*)(page + 128);
    hots[i].node = (unsigned*)(page + 256);
    if (pthread_create(&th[i], NULL, hot_main, &hots[i]) != 0) {
      fprintf(stderr, "restore_pages: pthread_create failed\n");
      return 1;
    }
  }
  pthread_t wth;
  if (walker && pthread_create(&wth, NULL, walker_main, NULL) != 0) {
    fprintf(stderr, "restore_pages: pthread_create failed\n");
    return 1;
  }
  printf("size_mib=%llu\nthreads=%d\nwalker=%s\n",
         (unsigned long long)size_mib, nhot, walker ? "on" : "off");
  printf("restore_pages: ready pid=%d\n", (int)getpid());
  fflush(stdout);

  uint64_t hist_at_restore[BUCKETS], hist_end[BUCKETS];
  int n = 0, restore = -1, warm = -1;
  const uint64_t start = now_ns(CLOCK_MONOTONIC);
  while (n < MAX_SAMPLES) {
    usleep(50000);
    samples[n].wall = now_ns(CLOCK_REALTIME);
    samples[n].mono = now_ns(CLOCK_MONOTONIC);
    samples[n].calls = total_calls();
    if (warm < 0 && samples[n].mono - start >= 1000000000ull) warm = n;
    if (restore < 0 && n > 0 &&
        samples[n].wall - samples[n - 1].wall > gap_ms * 1000000ull) {
      restore = n;
      snapshot_hist(hist_at_restore);
      atomic_store(&walker_go, 1);
      printf("restore_gap_ms=%.1f\n",
             (samples[n].wall - samples[n - 1].wall) / 1e6);
      fflush(stdout);
    }
    n++;
    if (restore >= 0 &&
        samples[n - 1].mono - samples[restore].mono >= after * 1000000000ull) {
      break;
    }
    if (restore < 0 && samples[n - 1].mono - start > max_wait * 1000000000ull) {
      break;
    }
  }
  snapshot_hist(hist_end);
  atomic_store(&stop_all, 1);
  for (int i = 0; i < nhot; i++) pthread_join(th[i], NULL);
  if (walker) pthread_join(wth, NULL);

  const int pre_end = restore > 0 ? restore - 1 : n - 1;
  const double pre = rate(warm >= 0 && warm < pre_end ? warm : 0, pre_end);
  printf("pre_rate=%.0f\n", pre);
  if (restore < 0) {
    printf("restore=none\nrestore_pages: done\n");
    return 3;
  }
  // The windows start at the first sample after the gap: the calls made in
  // the gap's last moment before it are the checkpoint's, not the
  // restore's.
  int w5 = restore, w20 = restore;
  while (w5 + 1 < n && samples[w5].mono - samples[restore].mono < 5000000000ull)
    w5++;
  while (w20 + 1 < n &&
         samples[w20].mono - samples[restore].mono < 20000000000ull)
    w20++;
  const double r5 = rate(restore, w5), r20 = rate(restore, w20);
  printf("rate_0_5s=%.0f\nrate_0_20s=%.0f\n", r5, r20);
  printf("ratio_0_5s=%.1f%%\nratio_0_20s=%.1f%%\n",
         pre > 0 ? 100 * r5 / pre : 0, pre > 0 ? 100 * r20 / pre : 0);
  uint64_t h[BUCKETS];
  for (int b = 0; b < BUCKETS; b++) h[b] = hist_end[b] - hist_at_restore[b];
  printf("latency_p50_ns<=%llu\nlatency_p99_ns<=%llu\nlatency_p999_ns<=%llu\n",
         (unsigned long long)quantile(h, 0.5),
         (unsigned long long)quantile(h, 0.99),
         (unsigned long long)quantile(h, 0.999));
  if (walker) {
    printf("walker_pages=%llu\nwalker_seconds=%.3f\n",
           (unsigned long long)walker_pages, walker_seconds);
  }
  printf("restore_pages: done\n");
  return 0;
}
