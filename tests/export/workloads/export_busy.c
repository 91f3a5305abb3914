/*
 * A known workload for the export tests: main -> export_outer -> export_leaf burns CPU in user
 * space (about 3/4 of the time), and export_syscalls asks the kernel for its parent pid in a loop
 * (the rest), so profiles carry both user and kernel frames.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void export_leaf(void)
{
	volatile unsigned long acc = 0;   /* a frame of its own, so frame pointers see the caller */
	for (unsigned long i = 0; i < 3000000; i++)
		acc += i ^ (acc >> 3);
	sink += acc;
}

__attribute__((noinline)) void export_outer(void)
{
	volatile int frame = 0;
	export_leaf();
	sink += frame;
}

__attribute__((noinline)) void export_syscalls(void)
{
	volatile int frame = 0;
	for (int i = 0; i < 4000; i++)
		sink += getppid();
	sink += frame;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 0;   /* 0 = forever */
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		export_outer();
		export_syscalls();
		if (seconds > 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds)
				return 0;
		}
	}
}
