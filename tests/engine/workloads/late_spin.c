/* The library late_lib.c loads after it began. */
#include <time.h>

__attribute__((noinline)) static double late_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

void late_spin(double seconds)
{
	double end = late_now() + seconds;
	volatile unsigned long x = 0;

	while (late_now() < end)
		for (int i = 0; i < 100000; i++)
			x += i;
}
