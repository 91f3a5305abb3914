/* Calls malloc from two known functions, 3 calls from alloc_three for every 1 from alloc_one. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void alloc_three(void)
{
	void *p = malloc(48);
	sink += (unsigned long)p;
	free(p);
}

__attribute__((noinline)) void alloc_one(void)
{
	void *p = malloc(80);
	sink += (unsigned long)p;
	free(p);
}

int main(int argc, char **argv)
{
	/* Calls per millisecond (default 20): bounded so the uprobe's cost stays small. */
	long per_ms = argc > 1 ? atol(argv[1]) : 20;
	struct timespec pause = {0, 1000000};

	for (;;) {
		for (long i = 0; i < per_ms; i++) {
			if (i % 4 == 3)
				alloc_one();
			else
				alloc_three();
		}
		nanosleep(&pause, NULL);
	}
}
