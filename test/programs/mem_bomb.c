/* A memory bomb that ends: maps and touches 4 MiB chunks until mmap fails
 * or MAX_MB is reached. Run only inside a sandbox with a memory limit
 * (test/exhaustion_test.sh): it either sees ENOMEM ("mem_bomb: ENOMEM
 * after N MiB", exit 0) or is killed by the limit (SIGKILL); the Sentry
 * must survive both. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK (4u << 20)

int main(int argc, char** argv) {
  long max_mb = argc > 1 ? atol(argv[1]) : 1024;
  long mb = 0;
  while (mb < max_mb) {
    char* p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      printf("mem_bomb: %s after %ld MiB\n",
             errno == ENOMEM ? "ENOMEM" : strerror(errno), mb);
      fflush(stdout);
      return errno == ENOMEM ? 0 : 1;
    }
    memset(p, 0x5a, CHUNK);
    mb += CHUNK >> 20;
  }
  printf("mem_bomb: no limit hit in %ld MiB\n", mb);
  return 2;
}
