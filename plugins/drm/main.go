// A plugin process lives for milliseconds: the runtime's watch of the
// cgroup's CPU limit is of no use to it, and costs its start about
// 20 µs (docs/performance.md#the-go-runtimes-start).
//go:debug updatemaxprocs=0

// Command drm is the CDI exec plugin that hands whole GPUs to containers as
// their Linux DRM device nodes (/dev/dri/cardN, /dev/dri/renderDN).
package main

import "github.com/cdi-exec/plugins/pkg/skel"

func main() { skel.Main(about) }
