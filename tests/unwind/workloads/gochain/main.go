package main

//go:noinline
func c(n uint64) uint64 {
	x := n
	for i := uint64(0); i < 3000000; i++ {
		x = x*6364136223846793005 + i
	}
	return x
}

//go:noinline
func b(n uint64) uint64 { return c(n+1) ^ n }

//go:noinline
func a(n uint64) uint64 { return b(n*3) + 7 }

func main() {
	var t uint64
	for {
		t += a(t)
	}
}
