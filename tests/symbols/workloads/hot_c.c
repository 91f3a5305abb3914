/* A local (static) C function burns the CPU: only .symtab (or a debug file) names it. */
#include <stdio.h>

static __attribute__((noinline)) double stripped_hot_loop(double x) {
    for (long i = 0; i < 50000000; i++) x = x * 0.999 + 1.0;
    return x;
}

int main(void) {
    volatile double sink = 0;
    for (;;) {
        sink = sink + stripped_hot_loop(sink);
        puts("");
    }
}
