/* A shell's way of running commands: fork, a moment of the parent's own code in the child, then
 * exec. Between forks the parent sleeps, as a shell waits. The parent is named forker-parent, each
 * child forker until its exec: a profiler told to sample `forker` never samples the parent.
 *
 *   forker [SPIN_K [CHILD_SECONDS]]   each child spins SPIN_K thousand times (default 1000: ~1 ms) in
 *                                     before_exec, then becomes `sleep CHILD_SECONDS` (default 0.5)
 *
 * The spin reads no clock: clock_gettime runs in the vDSO, which is no file, and a stack with a
 * frame in no file has no file hash for its samples to be named by after the exec.
 */
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void before_exec(unsigned long spins)
{
	volatile unsigned long done;

	for (done = 0; done < spins; done++)
		;
}

__attribute__((noinline)) void run_one(char *const argv[], unsigned long spin)
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
	unsigned long spin = (argc > 1 ? strtoul(argv[1], 0, 10) : 1000) * 1000;
	char *child[] = {"/bin/sleep", argc > 2 ? argv[2] : "0.5", NULL};

	prctl(PR_SET_NAME, "forker-parent");
	signal(SIGCHLD, SIG_IGN);      /* children reaped by the kernel */
	for (;;) {
		run_one(child, spin);
		usleep(20000);
	}
}
