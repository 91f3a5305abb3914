/* A leaf of hand-written assembly with no unwind information (no .cfi directives: no FDE covers
 * it), as some hand-written code has, which keeps rbp as a general register pointing into its
 * caller's stack: the frame-pointer fallback reads the words there as a frame, and the return
 * address it finds (0x10) lies in no mapping. Its caller and main have tables.
 *   garbage_frame SECONDS */
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
/* spin_rbp(words, iterations): rbp = words for the loop, restored after */
__asm__(".text\n"
	".globl spin_rbp\n"
	".type spin_rbp, @function\n"
	"spin_rbp:\n"
	"	push %rbp\n"
	"	mov %rdi, %rbp\n"
	"1:	dec %rsi\n"
	"	jnz 1b\n"
	"	pop %rbp\n"
	"	ret\n"
	".size spin_rbp, .-spin_rbp\n");
#else
#error "x86-64 only"
#endif

void spin_rbp(volatile long *words, long iterations);

__attribute__((noinline)) void garbage_caller(long iterations)
{
	/* what rbp points at: a "saved rbp" and a "return address" of 0x10 */
	volatile long words[4] = {0x7, 0x10, 0, 0};

	spin_rbp(words, iterations);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		garbage_caller(1000000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
	return 0;
}
