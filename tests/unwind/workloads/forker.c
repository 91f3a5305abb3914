/* A shell's way of running commands: fork, a moment of the parent's own code in the child, then
 * exec. Between forks the parent sleeps, as a shell waits. The parent is named forker-parent, each
 * child forker until its exec: a profiler told to sample `forker` never samples the parent.
 *
 *   forker [SPIN_MS [CHILD_SECONDS]]   each child spins SPIN_MS (default 2) in before_exec, then
 *                                      becomes `sleep CHILD_SECONDS` (default 0.5)
 */
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void before_exec(double seconds)
{
	double end = now() + seconds;
	volatile unsigned spins = 0;

	while (now() < end)
		spins++;
}

__attribute__((noinline)) void run_one(char *const argv[], double spin)
{
	if (fork() == 0) {
		prctl(PR_SET_NAME, "forker");
		before_exec(spin);
		execv(argv[0], argv);
		_exit(127);
	}
}

int main(int argc, char **argv)
{
	double spin = (argc > 1 ? atof(argv[1]) : 2.0) / 1000;
	char *child[] = {"/bin/sleep", argc > 2 ? argv[2] : "0.5", NULL};

	prctl(PR_SET_NAME, "forker-parent");
	signal(SIGCHLD, SIG_IGN);      /* children reaped by the kernel */
	for (;;) {
		run_one(child, spin);
		usleep(20000);
	}
}
