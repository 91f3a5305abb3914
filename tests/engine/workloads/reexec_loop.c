/*
 * A process that re-execs itself every ~0.28 s, spinning between: argv[1] counts the images, and
 * after argv[2] of them it exits. Each image is a new load address (PIE), with the same path,
 * comm and inode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void reexec_leaf(void)
{
	for (int i = 0; i < 20000; i++)
		sink += i * 3;
}

__attribute__((noinline)) void reexec_spin(double seconds)
{
	double end = now() + seconds;

	while (now() < end)
		reexec_leaf();
}

int main(int argc, char **argv)
{
	int image = argc > 1 ? atoi(argv[1]) : 0;
	int images = argc > 2 ? atoi(argv[2]) : 20;
	char next[16], self[4096];
	ssize_t n;

	reexec_spin(0.28);
	if (image + 1 >= images)
		return 0;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	snprintf(next, sizeof(next), "%d", image + 1);
	execv(self, (char *[]){argv[0], next, argv[2], NULL});
	return 1;
}
