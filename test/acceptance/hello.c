#include <stdio.h>
int main(){printf("hi from gcc\n");return 0;}
