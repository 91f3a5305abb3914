/* A process whose code is mostly in a library it loads after it began: its maps read at its first
 * samples lack the library. Spins in main until GO exists (at most 30 s), dlopen()s the library,
 * spins in its late_spin, then exits or sleeps.
 *   late_lib LIBRARY GO LIB_SECONDS exit|sleep */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void main_spin(const char *go)
{
	double end = now() + 30;
	volatile unsigned long x = 0;

	while (now() < end && access(go, F_OK) != 0)
		for (int i = 0; i < 100000; i++)
			x += i;
}

int main(int argc, char **argv)
{
	void *lib;
	void (*late_spin)(double);

	if (argc < 5)
		return 2;
	main_spin(argv[2]);
	lib = dlopen(argv[1], RTLD_NOW);
	if (!lib || !(late_spin = (void (*)(double))dlsym(lib, "late_spin"))) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	late_spin(atof(argv[3]));
	if (strcmp(argv[4], "sleep") == 0)
		sleep(60);
	return 0;
}
