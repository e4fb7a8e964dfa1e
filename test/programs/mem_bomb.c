/* A memory bomb that ends: maps and touches 4 MiB chunks until mmap fails
 * or MAX_MB is reached. Run only inside a sandbox with a memory limit
 * (test/exhaustion_test.sh): it either sees ENOMEM ("mem_bomb: ENOMEM
 * after N MiB", exit 0) or is killed by the sandbox's OOM killer (SIGKILL);
 * the Sentry must survive both.
 *   mem_bomb MAX_MB          the bomb itself
 *   mem_bomb MAX_MB child    forks the bomb and reports how it ended
 *                            ("mem_bomb: child killed by signal 9"), then
 *                            shows it can still allocate: exit 0 if the
 *                            child was killed by SIGKILL
 *   mem_bomb MAX_MB rlimit   under RLIMIT_AS of 64 MiB: mmap must fail
 *                            with ENOMEM before MAX_MB (exit 0) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK (4u << 20)

static int Bomb(long max_mb) {
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

int main(int argc, char** argv) {
  long max_mb = argc > 1 ? atol(argv[1]) : 1024;
  const char* mode = argc > 2 ? argv[2] : "";
  if (strcmp(mode, "rlimit") == 0) {
    struct rlimit rl = {64u << 20, 64u << 20};
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
      perror("mem_bomb: setrlimit(RLIMIT_AS)");
      return 1;
    }
    return Bomb(max_mb);
  }
  if (strcmp(mode, "child") == 0) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
      perror("mem_bomb: fork");
      return 1;
    }
    if (pid == 0) _exit(Bomb(max_mb));
    int st;
    if (waitpid(pid, &st, 0) != pid) {
      perror("mem_bomb: waitpid");
      return 1;
    }
    if (WIFSIGNALED(st)) {
      printf("mem_bomb: child killed by signal %d\n", WTERMSIG(st));
    } else {
      printf("mem_bomb: child exited %d\n", WEXITSTATUS(st));
    }
    // The parent goes on: its memory was not what the killer took.
    char* p = malloc(1 << 20);
    int ok = p != NULL;
    if (ok) memset(p, 1, 1 << 20);
    printf("mem_bomb: parent %s\n", ok ? "allocates after" : "cannot allocate");
    return ok && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : 1;
  }
  return Bomb(max_mb);
}
