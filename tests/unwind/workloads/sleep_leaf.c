/* Built with frame pointers; its waits are in libc (nanosleep -> clock_nanosleep), which has none,
 * called directly by the two waiting functions (a frame-pointer walk skips the direct caller).
 * wait_a sleeps 7 ms and wait_b 3 ms, in turn: off the CPU 70/30 under the two callers. */
#include <time.h>

void __attribute__((noinline)) wait_a(void)
{
	struct timespec t = {0, 7000000};

	nanosleep(&t, 0);
	asm volatile("");
}

void __attribute__((noinline)) wait_b(void)
{
	struct timespec t = {0, 3000000};

	nanosleep(&t, 0);
	asm volatile("");
}

int main(void)
{
	for (;;) {
		wait_a();
		wait_b();
	}
}
