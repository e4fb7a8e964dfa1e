# make + gcc: write a two-file C program and its Makefile into the working
# directory, build, run, rebuild after a change, clean up (acceptance.sh,
# scenario "make").
set -e
cat > main.c <<'END'
#include <stdio.h>
const char *greeting(void);
int main(void) {
  printf("%s from gcc\n", greeting());
  return 0;
}
END
cat > greet.c <<'END'
const char *greeting(void) { return "hi"; }
END
printf 'hello: main.o greet.o\n\tgcc -o hello main.o greet.o\n%%.o: %%.c\n\tgcc -O2 -c -o $@ $<\nclean:\n\trm -f hello *.o\n' > Makefile
make -s && ./hello
make -q hello && echo "up to date"
sleep 1
echo 'const char *greeting(void) { return "hello again"; }' > greet.c
make && ./hello
make -s clean
rm main.c greet.c Makefile
