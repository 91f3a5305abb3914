/*
 * A process that replaces its image under the same pid, for the exec tests.
 * It spins in in_prog_A until SIGUSR1, then execs:
 *   default:    itself again (same path, so same comm; a new ASLR base), spinning in after_reexec;
 *   -DFIRST:    argv[1], built with -DSECOND: spinning in in_prog_B_other.
 * Both binaries of the second case are named alike, so the comm does not change.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t go;

static void on_usr1(int sig)
{
	(void)sig;
	go = 1;
}

#ifdef SECOND
__attribute__((noinline)) void in_prog_B_other(void)
{
	for (;;)
		__asm__ volatile("" ::: "memory");
}

int main(void)
{
	in_prog_B_other();
	return 0;
}
#else
__attribute__((noinline)) void in_prog_A(void)
{
	while (!go)
		__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void after_reexec(void)
{
	for (;;)
		__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "again") == 0) {
		after_reexec();
		return 0;
	}
	signal(SIGUSR1, on_usr1);
	in_prog_A();
#ifdef FIRST
	execv(argv[1], (char *[]){argv[1], NULL});
#else
	{
		/* By its real path, as it was started: the comm stays the same. */
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

		if (n <= 0)
			return 1;
		self[n] = 0;
		execv(self, (char *[]){argv[0], "again", NULL});
	}
#endif
	return 1;
}
#endif
