/* Two phases: phase_a burns the CPU for argv[1] seconds, then phase_b does, forever; both
 * called from run_phases, so a diff of the two time ranges has one function grow and one shrink. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

#define SPIN(n) do { volatile unsigned long acc = 0; for (unsigned long i = 0; i < (n); i++) acc += i ^ (acc >> 3); sink += acc; } while (0)

__attribute__((noinline)) void phase_a(void) { SPIN(1000000); }
__attribute__((noinline)) void phase_b(void) { SPIN(1000000); }

__attribute__((noinline)) void run_phases(double seconds)
{
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds)
			phase_a();
		else
			phase_b();
	}
}

int main(int argc, char **argv)
{
	run_phases(argc > 1 ? atof(argv[1]) : 5);
	return 0;
}
