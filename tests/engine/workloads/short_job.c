/* A short job: spins ~1 s in functions of its own, then exits (argv[1]: seconds, default 1). */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void short_job_leaf(void)
{
	for (int i = 0; i < 20000; i++)
		sink += i * 5;
}

__attribute__((noinline)) void short_job_spin(double seconds)
{
	double end = now() + seconds;

	while (now() < end)
		short_job_leaf();
}

int main(int argc, char **argv)
{
	short_job_spin(argc > 1 ? atof(argv[1]) : 1.0);
	return 0;
}
