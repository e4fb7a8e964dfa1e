/* Must die with SIGABRT (status 134 through the runner). */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  printf("calling abort\n");
  fflush(stdout);
  abort();
}
