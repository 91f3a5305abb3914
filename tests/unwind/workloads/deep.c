/* A deep native stack: main > descend x 300 > spin, every frame a real call (no tail calls: the
 * volatile result is used after the call), built -fomit-frame-pointer so that the kernel unwinder
 * walks it with tables only. */
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void spin(void)
{
	for (;;)
		for (int i = 0; i < 1000000; i++)
			sink += i;
}

__attribute__((noinline)) static unsigned long descend(int depth)
{
	if (depth == 0) {
		spin();
		return 0;
	}
	return descend(depth - 1) + sink;
}

int main(int argc, char **argv)
{
	return (int)descend(argc > 1 ? atoi(argv[1]) : 300);
}
