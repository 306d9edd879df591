// Package stack gives the main goroutine, before any other package of the
// program initialises, the stack a plugin command needs.
//
// The runtime starts the main goroutine on a small stack and doubles it
// whenever a call would overflow it, copying the frames and fixing their
// pointers each time. A plugin lives for about a millisecond and a half, and
// its call chain (package initialisation, then the protocol, the store and
// discovery) needs 16 to 32 KiB, so it would pay for several such growths,
// each one copying a deeper stack and touching fresh pages and stack maps.
// Grown once here, while the stack holds only the runtime's frames, it never
// grows again: measured on whole processes, INFO and ADD each run about
// 0.13 ms faster (docs/performance.md#the-main-goroutines-stack).
//
// Packages initialise in the order of their import paths among those whose
// imports are done. This package imports nothing, so it initialises right
// after the runtime: it must stay that way (TestStackFirst in test/e2e
// checks it in each built plugin).
package stack

func init() { grow(false) }

// frame is the stack frame grow asks for; the runtime then doubles the
// stack until the frame fits, to 32 KiB.
const frame = 16 << 10

// grow has a frame of the given size; calling it makes the runtime grow the
// stack to fit it at once. The frame's size is fixed at compile time, but
// pad is zeroed only where it is declared: called with touch false, grow
// writes none of the new stack's pages, which the commands then fault in
// only as deep as they go. noinline keeps the compiler from seeing that
// touch is always false.
//
//go:noinline
func grow(touch bool) byte {
	if touch {
		var pad [frame]byte
		return last(pad[:])
	}
	return 0
}

// last keeps pad alive, so the compiler cannot drop the frame.
//
//go:noinline
func last(b []byte) byte { return b[len(b)-1] }
