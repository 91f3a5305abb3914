/* A workload for musl libc (built with musl-gcc, dynamic or static, with or without frame
 * pointers): every mode spends its time in a chain main -> work -> mid -> <mode's leaf>, the
 * leaf in musl's libc where the mode says so.
 *   copy:    memcpy, memset and strlen on 1 MiB buffers (musl's assembly and C string routines)
 *   sort:    qsort of 4096 ints, a comparison callback of the program (musl's smoothsort)
 *   print:   snprintf of numbers and a string (musl's vfprintf)
 *   threads: 4 threads of pthread_create running the copy loop (musl's thread start and __clone)
 *   signal:  SIGPROF every ms of CPU time; the handler runs a hot loop (musl's __restore_rt)
 *   deep:    a recursion 100 calls deep whose leaf spins
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define SIZE (1 << 20)
static char src[SIZE], dst[SIZE];
static int items[4096];
static volatile unsigned long sink;

__attribute__((noinline)) static void copy_leaf(void)
{
	memcpy(dst, src, SIZE);
	memset(dst, 'x', SIZE - 1);
	dst[SIZE - 1] = 0;
	sink += strlen(dst);
}

__attribute__((noinline)) static int compare(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

__attribute__((noinline)) static void sort_leaf(void)
{
	for (int i = 0; i < 4096; i++)
		items[i] = (int)((i * 2654435761u) >> 7);
	qsort(items, 4096, sizeof(int), compare);
}

__attribute__((noinline)) static void print_leaf(void)
{
	char buf[256];

	for (int i = 0; i < 1000; i++)
		sink += (unsigned long)snprintf(buf, sizeof(buf), "%d %s %x %lu", i, "musl", i * 7, sink);
}

__attribute__((noinline)) static void spin(void)
{
	for (int i = 0; i < 1000000; i++)
		sink += (unsigned long)i * 3;
}

__attribute__((noinline)) static int descend(int depth)
{
	if (depth == 0) {
		spin();
		return 0;
	}
	return descend(depth - 1) + (int)sink;     /* not a tail call, nor a loop */
}

static void (*leaf)(void) = copy_leaf;

__attribute__((noinline)) static void mid(void)
{
	leaf();
	sink++;
}

__attribute__((noinline)) static void work(void)
{
	for (;;) {
		mid();
		sink++;
	}
}

__attribute__((noinline)) static void *thread_main(void *arg)
{
	(void)arg;
	work();
	return 0;
}

__attribute__((noinline)) static void handler_spin(void)
{
	for (int i = 0; i < 200000; i++)
		sink += (unsigned long)i;
}

static void on_signal(int sig)
{
	(void)sig;
	handler_spin();
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "copy";

	memset(src, 'a', SIZE);
	if (!strcmp(mode, "sort"))
		leaf = sort_leaf;
	else if (!strcmp(mode, "print"))
		leaf = print_leaf;
	else if (!strcmp(mode, "deep")) {
		for (;;)
			sink += (unsigned long)descend(100);
	} else if (!strcmp(mode, "threads")) {
		pthread_t t[4];

		for (int i = 0; i < 4; i++)
			pthread_create(&t[i], 0, thread_main, 0);
		pthread_join(t[0], 0);
	} else if (!strcmp(mode, "signal")) {
		struct sigaction sa;
		struct itimerval it = {{0, 1000}, {0, 1000}};

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		sigaction(SIGPROF, &sa, 0);
		setitimer(ITIMER_PROF, &it, 0);
		leaf = print_leaf;
	}
	work();
	return 0;
}
