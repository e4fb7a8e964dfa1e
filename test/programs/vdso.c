/* The vDSO: AT_SYSINFO_EHDR points at an ELF image exporting Linux's
 * symbols (LINUX_2.6), libc's clock_gettime/gettimeofday/time go through it
 * a million times each, monotonic and in agreement with the system calls;
 * the vDSO's own entry points (unknown clocks, CPU clocks, getcpu); fork
 * keeps it, execve maps it anew.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <sched.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define N 1000000
/* How far the vDSO may be from the system call's clock: the sandbox's
 * vDSO is calibrated to well under a microsecond; this leaves room for a
 * preempted reading. */
#define AGREE_NS 2000000LL

static int64_t ns(const struct timespec *ts) {
  return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* The vDSO's dynamic symbol `name` with version `version`, or NULL. */
static void *vdso_sym(uintptr_t base, const char *name, const char *version) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
  const Elf64_Dyn *dyn = NULL;
  uintptr_t load = 0;
  int have_load = 0;
  for (int i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_DYNAMIC) dyn = (const Elf64_Dyn *)(base + ph[i].p_offset);
    if (ph[i].p_type == PT_LOAD && !have_load) {
      load = base + ph[i].p_offset - ph[i].p_vaddr;
      have_load = 1;
    }
  }
  if (dyn == NULL || !have_load) return NULL;
  const char *strtab = NULL;
  const Elf64_Sym *symtab = NULL;
  const uint32_t *hash = NULL;
  const Elf64_Half *versym = NULL;
  const Elf64_Verdef *verdef = NULL;
  for (; dyn->d_tag != DT_NULL; dyn++) {
    uintptr_t p = load + dyn->d_un.d_ptr;
    switch (dyn->d_tag) {
      case DT_STRTAB: strtab = (const char *)p; break;
      case DT_SYMTAB: symtab = (const Elf64_Sym *)p; break;
      case DT_HASH: hash = (const uint32_t *)p; break;
      case DT_VERSYM: versym = (const Elf64_Half *)p; break;
      case DT_VERDEF: verdef = (const Elf64_Verdef *)p; break;
    }
  }
  if (strtab == NULL || symtab == NULL || hash == NULL) return NULL;
  for (uint32_t i = 1; i < hash[1]; i++) {
    if (symtab[i].st_shndx == SHN_UNDEF || strcmp(strtab + symtab[i].st_name, name) != 0) {
      continue;
    }
    if (versym == NULL || verdef == NULL) return NULL;
    const Elf64_Verdef *d = verdef;
    for (;;) {
      if (d->vd_ndx == (versym[i] & 0x7fff)) {
        const Elf64_Verdaux *aux = (const Elf64_Verdaux *)((const char *)d + d->vd_aux);
        if (strcmp(strtab + aux->vda_name, version) != 0) return NULL;
        return (void *)(load + symtab[i].st_value);
      }
      if (d->vd_next == 0) return NULL;
      d = (const Elf64_Verdef *)((const char *)d + d->vd_next);
    }
  }
  return NULL;
}

/* Monotonic through libc N times, and agreement with the system call. */
static void check_clock(const char *label, clockid_t clk, int monotonic) {
  /* A coarse clock lags by up to its resolution, differently rounded. */
  struct timespec r;
  clock_getres(clk, &r);
  const int64_t slack = AGREE_NS + 2 * ns(&r);
  char name[128];
  struct timespec prev, cur;
  int backwards = 0, errors = 0;
  clock_gettime(clk, &prev);
  for (int i = 0; i < N; i++) {
    if (clock_gettime(clk, &cur) != 0) errors++;
    if (ns(&cur) < ns(&prev)) backwards++;
    prev = cur;
  }
  snprintf(name, sizeof(name), "%s: %d calls without error", label, N);
  CHECK(name, errors == 0);
  if (monotonic) {
    snprintf(name, sizeof(name), "%s: never goes backwards", label);
    CHECK(name, backwards == 0);
  }
  int agree = 0;
  for (int tries = 0; tries < 5 && !agree; tries++) {
    struct timespec a, b, c;
    syscall(SYS_clock_gettime, clk, &a);
    clock_gettime(clk, &b);
    syscall(SYS_clock_gettime, clk, &c);
    agree = ns(&b) >= ns(&a) - slack && ns(&b) <= ns(&c) + slack;
  }
  snprintf(name, sizeof(name), "%s: agrees with the system call", label);
  CHECK(name, agree);
}

static int exec_child(void) {
  /* Re-executed: the new image has its own vDSO. */
  uintptr_t base = getauxval(AT_SYSINFO_EHDR);
  struct timespec ts;
  int ok = base != 0 && vdso_sym(base, "__vdso_clock_gettime", "LINUX_2.6") != NULL &&
           clock_gettime(CLOCK_MONOTONIC, &ts) == 0;
  return ok ? 42 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "exec-child") == 0) return exec_child();
  if (argc >= 3 && strcmp(argv[1], "loop") == 0) {
    /* For test/vdso_traps.sh: N calls of each, counted by --strace. */
    long n = atol(argv[2]);
    struct timespec ts;
    struct timeval tv;
    for (long i = 0; i < n; i++) {
      clock_gettime(CLOCK_MONOTONIC, &ts);
      clock_gettime(CLOCK_REALTIME, &ts);
      gettimeofday(&tv, NULL);
      time(NULL);
    }
    printf("%ld calls of clock_gettime x2, gettimeofday, time\n", n);
    return 0;
  }

  uintptr_t base = getauxval(AT_SYSINFO_EHDR);
  CHECK("AT_SYSINFO_EHDR is set", base != 0);
  if (base == 0) return finish();
  CHECK("AT_SYSINFO_EHDR is page-aligned", (base & 4095) == 0);
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  CHECK("the vDSO is an x86-64 ELF shared object",
        memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
            eh->e_type == ET_DYN && eh->e_machine == EM_X86_64);

  int (*v_clock_gettime)(clockid_t, struct timespec *) =
      (int (*)(clockid_t, struct timespec *))vdso_sym(base, "__vdso_clock_gettime", "LINUX_2.6");
  int (*v_gettimeofday)(struct timeval *, void *) =
      (int (*)(struct timeval *, void *))vdso_sym(base, "__vdso_gettimeofday", "LINUX_2.6");
  long (*v_time)(long *) = (long (*)(long *))vdso_sym(base, "__vdso_time", "LINUX_2.6");
  int (*v_clock_getres)(clockid_t, struct timespec *) =
      (int (*)(clockid_t, struct timespec *))vdso_sym(base, "__vdso_clock_getres", "LINUX_2.6");
  long (*v_getcpu)(unsigned *, unsigned *, void *) =
      (long (*)(unsigned *, unsigned *, void *))vdso_sym(base, "__vdso_getcpu", "LINUX_2.6");
  CHECK("exports __vdso_clock_gettime@LINUX_2.6", v_clock_gettime != NULL);
  CHECK("exports __vdso_gettimeofday@LINUX_2.6", v_gettimeofday != NULL);
  CHECK("exports __vdso_time@LINUX_2.6", v_time != NULL);
  CHECK("exports __vdso_clock_getres@LINUX_2.6", v_clock_getres != NULL);
  CHECK("exports __vdso_getcpu@LINUX_2.6", v_getcpu != NULL);
  CHECK("exports clock_gettime@LINUX_2.6 (same function)",
        vdso_sym(base, "clock_gettime", "LINUX_2.6") == (void *)v_clock_gettime);
  if (!v_clock_gettime || !v_gettimeofday || !v_time || !v_clock_getres || !v_getcpu) {
    return finish();
  }

  /* Through libc, which uses the vDSO. */
  check_clock("CLOCK_MONOTONIC", CLOCK_MONOTONIC, 1);
  check_clock("CLOCK_REALTIME", CLOCK_REALTIME, 0);
  check_clock("CLOCK_BOOTTIME", CLOCK_BOOTTIME, 1);
  check_clock("CLOCK_MONOTONIC_COARSE", CLOCK_MONOTONIC_COARSE, 1);

  struct timeval prev_tv, tv;
  int tv_back = 0;
  gettimeofday(&prev_tv, NULL);
  for (int i = 0; i < N; i++) {
    gettimeofday(&tv, NULL);
    if (tv.tv_sec < prev_tv.tv_sec ||
        (tv.tv_sec == prev_tv.tv_sec && tv.tv_usec < prev_tv.tv_usec)) {
      tv_back++;
    }
    prev_tv = tv;
  }
  CHECK("gettimeofday: 1000000 calls, never backwards", tv_back == 0);
  /* Bracketed by two system calls, as check_clock does: a preemption
   * between two reads is not a disagreement. */
  int tv_agree = 0;
  for (int tries = 0; tries < 5 && !tv_agree; tries++) {
    struct timeval a, c;
    syscall(SYS_gettimeofday, &a, NULL);
    gettimeofday(&tv, NULL);
    syscall(SYS_gettimeofday, &c, NULL);
    const int64_t us_a = (int64_t)a.tv_sec * 1000000 + a.tv_usec;
    const int64_t us_b = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
    const int64_t us_c = (int64_t)c.tv_sec * 1000000 + c.tv_usec;
    tv_agree = us_b >= us_a - AGREE_NS / 1000 && us_b <= us_c + AGREE_NS / 1000;
  }
  CHECK("gettimeofday agrees with the system call", tv_agree);
  time_t prev_t = time(NULL), t;
  int t_back = 0;
  for (int i = 0; i < N; i++) {
    t = time(NULL);
    if (t < prev_t) t_back++;
    prev_t = t;
  }
  CHECK("time: 1000000 calls, never backwards", t_back == 0);
  CHECK("time agrees with the system call", labs((long)time(NULL) - syscall(SYS_time, NULL)) <= 1);

  /* The vDSO's entry points themselves. */
  struct timespec ts, res, sres;
  CHECK("__vdso_clock_gettime(CLOCK_MONOTONIC)", v_clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
  CHECK("__vdso_clock_gettime(unknown clock) = -EINVAL", v_clock_gettime(12345, &ts) == -EINVAL);
  CHECK("__vdso_clock_gettime(CLOCK_PROCESS_CPUTIME_ID)",
        v_clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0 && ns(&ts) > 0);
  CHECK("__vdso_clock_gettime(CLOCK_THREAD_CPUTIME_ID)",
        v_clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0 && ns(&ts) > 0);
  CHECK("__vdso_clock_getres(CLOCK_MONOTONIC) = the system call's",
        v_clock_getres(CLOCK_MONOTONIC, &res) == 0 &&
            syscall(SYS_clock_getres, CLOCK_MONOTONIC, &sres) == 0 && ns(&res) == ns(&sres));
  CHECK("__vdso_clock_getres(CLOCK_REALTIME_COARSE) = the system call's",
        v_clock_getres(CLOCK_REALTIME_COARSE, &res) == 0 &&
            syscall(SYS_clock_getres, CLOCK_REALTIME_COARSE, &sres) == 0 &&
            ns(&res) == ns(&sres));
  CHECK("__vdso_clock_getres(unknown clock) = -EINVAL", v_clock_getres(12345, &res) == -EINVAL);
  struct timeval vtv;
  struct { int minuteswest, dsttime; } tz = {-1, -1};
  CHECK("__vdso_gettimeofday with a timezone",
        v_gettimeofday(&vtv, &tz) == 0 && tz.minuteswest == 0 && tz.dsttime == 0);
  long vt = 0;
  CHECK("__vdso_time stores and returns the time", v_time(&vt) == vt && vt > 1600000000);
  unsigned cpu = ~0u, node = ~0u;
  CHECK("__vdso_getcpu", v_getcpu(&cpu, &node, NULL) == 0 && cpu < CPU_SETSIZE && node != ~0u);

  /* No mprotect/munmap of [vdso] or [vvar] here: what Linux allows depends
   * on its version and configuration (6.1 lets mprotect make the text
   * writable; kernels with CONFIG_MSEAL_SYSTEM_MAPPINGS refuse any change).
   * sentry/vdso/vdso_test.cc pins the 6.1 behaviour the sandbox reports. */

  /* fork keeps the vDSO at the same place. */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    struct timespec c;
    _exit(getauxval(AT_SYSINFO_EHDR) == base && clock_gettime(CLOCK_MONOTONIC, &c) == 0 &&
                  v_clock_gettime(CLOCK_REALTIME, &c) == 0
              ? 42
              : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK("fork: the child has the vDSO", WIFEXITED(st) && WEXITSTATUS(st) == 42);

  /* execve maps it anew. */
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    char *args[] = {argv[0], "exec-child", NULL};
    execv(argv[0], args);
    _exit(2);
  }
  waitpid(pid, &st, 0);
  CHECK("execve: the new image has a vDSO", WIFEXITED(st) && WEXITSTATUS(st) == 42);

  return finish();
}
