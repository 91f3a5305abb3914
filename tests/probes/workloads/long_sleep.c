/* Off the CPU in sleep_long: 300 ms per call, longer than the test's collect interval. */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <time.h>

__attribute__((noinline)) void sleep_long(void)
{
	struct timespec ts = {0, 300000000};
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(SYS_nanosleep), "D"(&ts), "S"(0) : "rcx", "r11", "memory");
}

int main(void)
{
	for (;;)
		sleep_long();
}
