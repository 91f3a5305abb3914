/* N children, one after the other, each spinning a few milliseconds on the CPU and exiting: many
 * short processes, each sampled a few times at a high rate (tests/engine/test_new_processes.py). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void spin(long iterations)
{
	volatile long i;

	for (i = 0; i < iterations; i++)
		;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	long iterations = argc > 2 ? atol(argv[2]) : 3000000;

	for (int i = 0; i < n; i++) {
		pid_t child = fork();

		if (child == 0) {
			spin(iterations);
			_exit(0);
		}
		if (child > 0)
			waitpid(child, NULL, 0);
	}
	return 0;
}
