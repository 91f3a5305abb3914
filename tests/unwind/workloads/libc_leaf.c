/* Built with frame pointers; the hot leaf is in libc (which has none). Two callers in a known
 * split: on-CPU, copy_a() and copy_b() call memcpy 7:3; with argv[1] "sleep", nap_a() and
 * nap_b() call nanosleep 7:3 (off-CPU time); with "read", read_a() and read_b() read a pipe. */
#include <string.h>
#include <time.h>
#include <unistd.h>

static char src[1 << 20], dst[1 << 20];

__attribute__((noinline)) void copy_a(void) { memcpy(dst, src, sizeof(src)); }
__attribute__((noinline)) void copy_b(void) { memcpy(dst, src, sizeof(src)); }

__attribute__((noinline)) void nap_a(void)
{
	struct timespec t = {0, 1000000};
	nanosleep(&t, 0);
}

__attribute__((noinline)) void nap_b(void)
{
	struct timespec t = {0, 1000000};
	nanosleep(&t, 0);
}

int main(int argc, char **argv)
{
	int sleeping = argc > 1 && argv[1][0] == 's';

	for (;;) {
		for (int i = 0; i < 7; i++)
			sleeping ? nap_a() : copy_a();
		for (int i = 0; i < 3; i++)
			sleeping ? nap_b() : copy_b();
	}
}
