/* The initial process state built by the loader: argv, envp, auxv.
 *
 * compare.sh passes fixed arguments and environment variables (SBX_*), see
 * test/CMakeLists.txt.  Prints the arguments and the selected variables, and
 * checks auxv entries against what the program can see of itself.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "common.h"

#ifndef AT_EXECFN
#define AT_EXECFN 31
#endif
#ifndef AT_RANDOM
#define AT_RANDOM 25
#endif

/* Provided by GNU ld when the ELF header is part of a loaded segment. */
extern const Elf64_Ehdr __ehdr_start __attribute__((weak, visibility("hidden")));
extern char _start[] __attribute__((weak));

struct first_obj {
  int seen;
  uintptr_t phdr;
  int phnum;
};

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data) {
  struct first_obj *f = data;
  if (!f->seen) {
    f->seen = 1;
    f->phdr = (uintptr_t)info->dlpi_phdr;
    f->phnum = info->dlpi_phnum;
  }
  return 0;
}

static const char *show(const char *s) { return s ? s : "(unset)"; }

int main(int argc, char **argv, char **envp) {
  /* argv / envp / auxv layout on the initial stack. */
  printf("argc: %d\n", argc);
  for (int i = 1; i < argc; i++) printf("argv[%d]: \"%s\"\n", i, argv[i]);
  CHECK("argv[0] non-empty", argv[0] && argv[0][0]);
  CHECK("argv[argc] == NULL", argv[argc] == NULL);
  CHECK("envp follows argv", envp == argv + argc + 1);
  CHECK("argv 8-byte aligned", ((uintptr_t)argv & 7) == 0);

  char **e = envp;
  while (*e) e++;
  Elf64_auxv_t *auxv = (Elf64_auxv_t *)(e + 1);
  unsigned long stack_pagesz = 0, stack_entry = 0, stack_phdr = 0;
  int n_aux = 0, has_null_end = 0;
  for (Elf64_auxv_t *a = auxv; n_aux < 256; a++, n_aux++) {
    if (a->a_type == AT_NULL) { has_null_end = 1; break; }
    if (a->a_type == AT_PAGESZ) stack_pagesz = a->a_un.a_val;
    if (a->a_type == AT_ENTRY) stack_entry = a->a_un.a_val;
    if (a->a_type == AT_PHDR) stack_phdr = a->a_un.a_val;
  }
  CHECK("auxv follows envp and ends with AT_NULL", has_null_end);
  CHECK("auxv on stack matches getauxval(AT_PAGESZ)", stack_pagesz == getauxval(AT_PAGESZ));
  CHECK("auxv on stack matches getauxval(AT_ENTRY)", stack_entry == getauxval(AT_ENTRY));
  CHECK("auxv on stack matches getauxval(AT_PHDR)", stack_phdr == getauxval(AT_PHDR));

  /* Selected environment variables (set by compare.sh). */
  printf("SBX_ALPHA=%s\n", show(getenv("SBX_ALPHA")));
  printf("SBX_SPACES=%s\n", show(getenv("SBX_SPACES")));
  printf("SBX_EMPTY=%s\n", show(getenv("SBX_EMPTY")));
  printf("SBX_UNSET=%s\n", show(getenv("SBX_UNSET")));

  /* AT_PAGESZ */
  printf("AT_PAGESZ: %lu\n", getauxval(AT_PAGESZ));
  CHECK("AT_PAGESZ == sysconf(_SC_PAGESIZE)", getauxval(AT_PAGESZ) == (unsigned long)sysconf(_SC_PAGESIZE));

  /* AT_RANDOM: 16 readable bytes, not all zero. */
  const unsigned char *rnd = (const unsigned char *)getauxval(AT_RANDOM);
  CHECK("AT_RANDOM present", rnd != NULL);
  if (rnd) {
    unsigned orv = 0;
    for (int i = 0; i < 16; i++) orv |= rnd[i];
    CHECK("AT_RANDOM 16 bytes readable and not all zero", orv != 0);
  }

  /* AT_PHDR / AT_PHNUM / AT_PHENT against our own ELF header. */
  const Elf64_Ehdr *eh = &__ehdr_start;
  CHECK("__ehdr_start available", eh != NULL);
  if (eh) {
    CHECK("ELF magic at __ehdr_start", memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0);
    uintptr_t want_phdr = (uintptr_t)eh + eh->e_phoff;
    CHECK("AT_PHDR == __ehdr_start + e_phoff", getauxval(AT_PHDR) == want_phdr);
    CHECK("AT_PHNUM == e_phnum", getauxval(AT_PHNUM) == eh->e_phnum);
    CHECK("AT_PHENT == sizeof(Elf64_Phdr)", getauxval(AT_PHENT) == sizeof(Elf64_Phdr));
    /* Load bias: where the PT_LOAD holding the header landed. */
    const Elf64_Phdr *ph = (const Elf64_Phdr *)want_phdr;
    uintptr_t bias = 0;
    int found_load = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
      if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0) {
        bias = (uintptr_t)eh - ph[i].p_vaddr;
        found_load = 1;
        break;
      }
    }
    CHECK("PT_LOAD at offset 0", found_load);
    printf("ELF type: %s\n", eh->e_type == ET_DYN ? "ET_DYN (PIE)" : eh->e_type == ET_EXEC ? "ET_EXEC" : "other");
    CHECK("AT_ENTRY == e_entry + load bias", getauxval(AT_ENTRY) == eh->e_entry + bias);
    if (eh->e_type == ET_EXEC) CHECK("ET_EXEC load bias is 0", bias == 0);
  }
  CHECK("AT_ENTRY non-zero", getauxval(AT_ENTRY) != 0);
  if (_start) CHECK("AT_ENTRY == &_start", getauxval(AT_ENTRY) == (uintptr_t)_start);

  struct first_obj fo = {0, 0, 0};
  dl_iterate_phdr(phdr_cb, &fo);
  CHECK("dl_iterate_phdr reports the main object", fo.seen);
  CHECK("dl_iterate_phdr phdr == AT_PHDR", fo.phdr == getauxval(AT_PHDR));
  CHECK("dl_iterate_phdr phnum == AT_PHNUM", (unsigned long)fo.phnum == getauxval(AT_PHNUM));

  /* Credentials and other entries. */
  CHECK("AT_UID == getuid()", getauxval(AT_UID) == getuid());
  CHECK("AT_EUID == geteuid()", getauxval(AT_EUID) == geteuid());
  CHECK("AT_GID == getgid()", getauxval(AT_GID) == getgid());
  CHECK("AT_EGID == getegid()", getauxval(AT_EGID) == getegid());
  CHECK("AT_SECURE == 0", getauxval(AT_SECURE) == 0);
  printf("AT_CLKTCK: %lu\n", getauxval(AT_CLKTCK));
  CHECK("AT_BASE == 0 (no interpreter)", getauxval(AT_BASE) == 0);
  const char *execfn = (const char *)getauxval(AT_EXECFN);
  CHECK("AT_EXECFN present", execfn != NULL && execfn[0] != 0);
  if (execfn && argv[0]) {
    const char *a = strrchr(execfn, '/'), *b = strrchr(argv[0], '/');
    a = a ? a + 1 : execfn;
    b = b ? b + 1 : argv[0];
    CHECK("basename(AT_EXECFN) == basename(argv[0])", strcmp(a, b) == 0);
  }
  return finish();
}
