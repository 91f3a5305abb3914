/* main -> a -> qsort (libc) -> compare -> b -> c, built -fomit-frame-pointer: the stack crosses
 * libc and comes back into the program through a callback. */
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long c(unsigned long n)
{
	unsigned long x = n;

	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005UL + i;
	sink = x;
	return x;
}

__attribute__((noinline)) unsigned long b(unsigned long n)
{
	unsigned long r = c(n + 1);

	sink += r;
	return r ^ n;
}

__attribute__((noinline)) int compare(const void *x, const void *y)
{
	sink += b(*(const int *)x);
	return *(const int *)x - *(const int *)y;
}

__attribute__((noinline)) void a(void)
{
	int v[64];

	for (int i = 0; i < 64; i++)
		v[i] = (i * 37) % 64;
	qsort(v, 64, sizeof(int), compare);
}

int main(void)
{
	for (;;)
		a();
}
