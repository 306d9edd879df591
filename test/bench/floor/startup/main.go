// Command startup is the start-up floor of the benchmark: what a Go plugin
// with this project's dependencies costs before it does any work of its
// own. It links what every plugin links from outside the module (os,
// encoding/json, bbolt, x/sys/unix), so their package initialisation runs,
// reads stdin to its end and prints a fixed answer.
package main

import (
	_ "encoding/json"
	"io"
	"os"

	_ "go.etcd.io/bbolt"
	_ "golang.org/x/sys/unix"
)

func main() {
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		os.Exit(1)
	}
	os.Stdout.WriteString("{\n  \"cdiVersion\": \"0.0.2\"\n}\n")
}
