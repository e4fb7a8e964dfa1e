# make + gcc: write a C program and a Makefile into the working directory,
# build, run, clean up (acceptance.sh, scenario "make").
set -e
cat > hello.c <<'END'
#include <stdio.h>
int main(void) {
  puts("hi from gcc");
  return 0;
}
END
printf 'all: hello\n\t./hello\nhello: hello.c\n\tgcc -O2 -o hello hello.c\n' > Makefile
make -s
make -s -q hello && echo "up to date"
rm hello hello.c Makefile
