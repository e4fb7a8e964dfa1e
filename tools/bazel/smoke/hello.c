#include <stdio.h>

#ifndef FLAVOUR
#define FLAVOUR "glibc"
#endif

int main(void) {
  printf("hello from a static %s program\n", FLAVOUR);
  return 42;
}
