/* main calls hot_a and hot_b, which burn 75% and 25% of a busy loop. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

/*
 * The loop is written into each function so that hot_a and hot_b are the leaves. It keeps a
 * volatile local so that the function has a stack frame: gcc sets up no frame pointer in a
 * leaf that never touches the stack, even with -fno-omit-frame-pointer, and then no
 * frame-pointer unwinder (perf's included) can see the leaf's caller.
 */
#define SPIN(n)                                              \
	do {                                                 \
		volatile unsigned long acc = 0;              \
		for (unsigned long i = 0; i < (n); i++)      \
			acc += i ^ (acc >> 3);               \
		sink += acc;                                 \
	} while (0)

__attribute__((noinline)) void hot_a(void) { SPIN(3000000); }
__attribute__((noinline)) void hot_b(void) { SPIN(1000000); }

int main(int argc, char **argv)
{
	/* Optional run time in seconds, then exit (0 = forever). */
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		hot_a();
		hot_b();
		if (seconds > 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds)
				return 0;
		}
	}
}
