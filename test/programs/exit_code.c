/* Exit status propagation: must exit with 42 after flushing its output. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  printf("exiting with 42\n");
  exit(42);
}
