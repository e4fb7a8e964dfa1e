// Built with its own copts (see BUILD.bazel): checks that they applied.
#ifndef __OPTIMIZE__
#error "special.cc must be built with -O3"
#endif

int SmokeSpecial() { return 7; }
