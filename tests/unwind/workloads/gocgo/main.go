// Go calling C through cgo: main.a -> main.b -> C.c_leaf -> spin (C built -fomit-frame-pointer).
// The C code runs on the g0 stack (runtime.asmcgocall switches stacks).
package main

/*
#cgo CFLAGS: -O2 -fomit-frame-pointer
__attribute__((noinline)) static unsigned long spin(unsigned long n)
{
	unsigned long x = n;
	for (int i = 0; i < 3000000; i++)
		x = x * 6364136223846793005UL + i;
	return x;
}
__attribute__((noinline)) unsigned long c_leaf(unsigned long n) { return spin(n) ^ n; }
*/
import "C"

//go:noinline
func b(n uint64) uint64 { return uint64(C.c_leaf(C.ulong(n))) }

//go:noinline
func a(n uint64) uint64 { return b(n*3) + 7 }

func main() {
	var t uint64
	for {
		t += a(t)
	}
}
