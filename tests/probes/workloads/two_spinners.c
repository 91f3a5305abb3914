/* Two threads that only burn CPU, so either one is sampled often; prints nothing. */
#include <pthread.h>

static volatile unsigned long counter;

__attribute__((noinline)) void *spin(void *arg)
{
	(void)arg;
	for (;;)
		counter++;
	return 0;
}

int main(void)
{
	pthread_t t;

	pthread_create(&t, 0, spin, 0);
	spin(0);
	return 0;
}
