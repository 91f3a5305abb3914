/* main -> a -> b -> c, built without frame pointers. Modes (argv[1]):
 *   busy     c() spins in user code
 *   syscall  c() makes system calls (samples land in the kernel: user regs from pt_regs)
 *   signal   a() raises SIGUSR1 in a loop; the handler calls b() -> c() (a signal frame on the stack)
 *   threads  8 threads run a -> b -> c
 *   jit      b() calls c() through anonymous executable code without unwind info that keeps a
 *            frame pointer (push rbp; mov rbp, rsp; call *rdi; pop rbp; ret)
 *   churn    main runs a -> b -> c while another thread maps, splits (mprotect) and unmaps memory
 *            without a pause: the address space changes under most samples (the mmap lock's
 *            writer at work, the VMA tree rewritten)
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile unsigned long sink;
static int mode_syscall, mode_jit;
static unsigned long (*jit)(unsigned long (*)(unsigned long));

__attribute__((noinline)) unsigned long c(unsigned long n)
{
	unsigned long x = n;

	if (mode_syscall) {
		for (int i = 0; i < 2000; i++)
			x += getppid();
	} else {
		for (int i = 0; i < 3000000; i++)
			x = x * 6364136223846793005UL + i;
	}
	sink = x;
	return x;
}

__attribute__((noinline)) unsigned long b(unsigned long n)
{
	unsigned long r = mode_jit ? jit(c) : c(n + 1);

	sink += r;
	return r ^ n;
}

static void on_signal(int sig)
{
	sink += b(sig);
}

__attribute__((noinline)) unsigned long a(unsigned long n, int by_signal)
{
	unsigned long r;

	if (by_signal) {
		raise(SIGUSR1);
		r = sink;
	} else {
		r = b(n * 3);
	}
	sink += r;
	return r + 7;
}

static void *churn_main(void *arg)
{
	for (;;) {
		char *p = mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			continue;
		p[0] = 1;
		mprotect(p + 4096, 4096, PROT_READ);       /* splits the VMA in three */
		munmap(p, 1 << 20);
	}
	return arg;
}

static void *thread_main(void *arg)
{
	unsigned long t = (unsigned long)arg;

	for (;;)
		t += a(t, 0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "busy";
	int by_signal = strcmp(mode, "signal") == 0;
	unsigned long t = 0;

	mode_syscall = strcmp(mode, "syscall") == 0;
	mode_jit = strcmp(mode, "jit") == 0;
	if (mode_jit) {
		static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
		void *mem = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		memcpy(mem, code, sizeof(code));
		jit = (unsigned long (*)(unsigned long (*)(unsigned long)))mem;
	}
	if (by_signal)
		signal(SIGUSR1, on_signal);
	if (strcmp(mode, "churn") == 0) {
		pthread_t churn;

		pthread_create(&churn, 0, churn_main, 0);
	}
	if (strcmp(mode, "threads") == 0) {
		pthread_t threads[8];

		for (long i = 0; i < 8; i++)
			pthread_create(&threads[i], 0, thread_main, (void *)i);
		pthread_join(threads[0], 0);
	}
	for (;;)
		t += a(t, by_signal);
	return (int)t;
}
