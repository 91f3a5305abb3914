/* A plugin host that unloads one library and loads another at the same address, over and over:
 * run_a -> run_lib -> a_hot (libswap_a.so) for a phase, then run_b -> run_lib -> b_hot (libswap_b.so).
 * The two libraries put different functions at the same addresses (b_hot where a_pad is), so an
 * address named with the other library's file shows as the other library's function.
 *   swap_libs LIB_A LIB_B SECONDS_PER_PHASE REPORT   (REPORT: the addresses of a_pad and b_hot, once) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*hot_fn)(double);

__attribute__((noinline)) void run_lib(const char *path, const char *symbol, const char *reported, double seconds,
				   void **at)
{
	void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	hot_fn hot;

	if (!handle) {
		fprintf(stderr, "%s\n", dlerror());
		exit(1);
	}
	hot = (hot_fn)dlsym(handle, symbol);
	*at = dlsym(handle, reported);
	hot(seconds);
	dlclose(handle);
}

__attribute__((noinline)) void run_a(const char *path, double seconds, void **at)
{
	run_lib(path, "a_hot", "a_pad", seconds, at);
	__asm__ volatile("");
}

__attribute__((noinline)) void run_b(const char *path, double seconds, void **at)
{
	run_lib(path, "b_hot", "b_hot", seconds, at);
	__asm__ volatile("");
}

int main(int argc, char **argv)
{
	double seconds = atof(argv[3]);
	void *a = 0, *b = 0;

	for (int i = 0;; i++) {
		run_a(argv[1], seconds, &a);
		run_b(argv[2], seconds, &b);
		if (i == 0) {
			FILE *report = fopen(argv[4], "w");

			fprintf(report, "%p %p\n", a, b);
			fclose(report);
		}
	}
}
