// A Go server's clock reads: time.Since in a loop. Each goes through runtime.nanotime1, which
// moves to the g0 stack and calls the vDSO's clock_gettime.
package main

import "time"

var sink time.Duration

//go:noinline
func measure(start time.Time) time.Duration {
	return time.Since(start)
}

//go:noinline
func loop() {
	start := time.Now()
	for {
		sink += measure(start)
	}
}

func main() {
	loop()
}
