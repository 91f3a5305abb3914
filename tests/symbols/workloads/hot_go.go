// A Go function burns the CPU: its name must come from .gopclntab, stripped or not.
package main

import "fmt"

//go:noinline
func crunchNumbers(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i % 7
	}
	return s
}

func main() {
	for {
		fmt.Sprint(crunchNumbers(10000000))
	}
}
