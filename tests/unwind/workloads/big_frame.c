/* A function with a frame of more than 32 KiB (LLVM's optimizer passes have such frames): main >
 * big_frame > spin, built -fomit-frame-pointer, so that the kernel unwinder must step through
 * big_frame by its CFA offset (rsp + ~40,000) to reach main and the process's root. */
#include <string.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void spin(char *scratch)
{
	for (;;)
		for (int i = 0; i < 1000000; i++)
			sink += scratch[i & 4095];
}

__attribute__((noinline)) static unsigned long big_frame(int seed)
{
	char scratch[40000];

	memset(scratch, seed, sizeof(scratch));
	spin(scratch);
	return scratch[seed & 0xffff] + sink;
}

int main(int argc, char **argv)
{
	(void)argv;
	return (int)big_frame(argc);
}
