/* top_outer calls top_spin (the hot leaf) in a loop: top_spin has the self samples, top_outer
 * and main the total ones. Runs for argv[1] seconds (0: forever). */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void top_spin(void)
{
	volatile unsigned long acc = 0;   /* a stack frame, so the caller is seen by FP unwinding */
	for (unsigned long i = 0; i < 2000000; i++)
		acc += i ^ (acc >> 3);
	sink += acc;
}

__attribute__((noinline)) void top_outer(void)
{
	for (int i = 0; i < 4; i++)
		top_spin();
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		top_outer();
		if (seconds > 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds)
				return 0;
		}
	}
}
