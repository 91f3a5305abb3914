/* Two phases: phase_a burns the CPU until SIGUSR1, then phase_b does, forever; both called from
 * run_phases, so a diff of the two time ranges has one function grow and one shrink. */
#include <signal.h>

static volatile unsigned long sink;
static volatile sig_atomic_t switched;

#define SPIN(n) do { volatile unsigned long acc = 0; for (unsigned long i = 0; i < (n); i++) acc += i ^ (acc >> 3); sink += acc; } while (0)

__attribute__((noinline)) void phase_a(void) { SPIN(1000000); }
__attribute__((noinline)) void phase_b(void) { SPIN(1000000); }

static void on_usr1(int sig) { (void)sig; switched = 1; }

__attribute__((noinline)) void run_phases(void)
{
	for (;;) {
		if (switched)
			phase_b();
		else
			phase_a();
	}
}

int main(void)
{
	signal(SIGUSR1, on_usr1);
	run_phases();
	return 0;
}
