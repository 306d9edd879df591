// Command cdictl is the reference caller of the CDI exec plugins: it finds
// the node's plugin configs, negotiates versions, reports capacity, adds and
// deletes allocations across plugins, lists them and collects leaked ones.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], env{getenv: os.Getenv, environ: os.Environ, stdout: os.Stdout, stderr: os.Stderr}))
}
