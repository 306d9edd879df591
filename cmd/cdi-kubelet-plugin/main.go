// Command cdi-kubelet-plugin makes the resource types of the CDI exec
// plugins Kubernetes resources. Its device-plugin mode serves each type to
// the kubelet through the device-plugin API (docs/kubernetes.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], env{getenv: os.Getenv, stdout: os.Stdout, stderr: os.Stderr}))
}
