/* A short process that spends a good part of its life in exit: it touches a large heap, works on it
 * for a moment, and exits, so the kernel frees every page in exit_mmap after the task has given up
 * its address space (task->mm is NULL there). Run in a shell loop: a new process every ~0.1 s. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static unsigned long work(const unsigned char *p, size_t n)
{
	unsigned long s = 0;

	for (size_t i = 0; i < n; i += 64)
		s += p[i] * i;
	return s;
}

int main(void)
{
	size_t n = (size_t)192 << 20;
	unsigned char *p = malloc(n);
	volatile unsigned long s = 0;

	if (!p)
		return 1;
	memset(p, 1, n);
	for (int r = 0; r < 8; r++)
		s += work(p, n);
	return (int)(s & 1);
}
