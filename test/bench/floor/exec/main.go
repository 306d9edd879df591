// Command exec is the exec floor of the benchmark: a static Go binary that
// does nothing, so its wall time is process creation plus the Go runtime's
// start and exit.
package main

func main() {}
