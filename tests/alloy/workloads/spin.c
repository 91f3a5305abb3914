/* A known workload: burns CPU in functions with names a test can look for. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void hotstack_alloy_spin_leaf(void) {
    for (int i = 0; i < 100000; i++)
        sink += i * 7;
}

__attribute__((noinline)) void hotstack_alloy_spin(void) {
    for (;;)
        hotstack_alloy_spin_leaf();
}

int main(int argc, char **argv) {
    /* "idle" sleeps instead: a process that is discovered but never on CPU */
    if (argc > 1 && argv[1][0] == 'i') {
        for (;;)
            pause();
    }
    hotstack_alloy_spin();
    return 0;
}
