// A plugin process lives for milliseconds: the runtime's watch of the
// cgroup's CPU limit is of no use to it, and costs its start about
// 20 µs (docs/performance.md#the-go-runtimes-start).
//go:debug updatemaxprocs=0

// Command generic is the CDI exec plugin that hands out any device nodes
// a list of rules selects: by path glob under /dev or by sysfs class and
// name, filtered by the USB device they hang off, grouped per USB device
// or PCI function, and shared by up to N requests (docs/plugins.md#generic).
package main

import "github.com/cdi-exec/plugins/pkg/skel"

func main() { skel.Main(about) }
