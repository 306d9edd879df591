// A plugin process lives for milliseconds: the runtime's watch of the
// cgroup's CPU limit is of no use to it, and costs its start about
// 20 µs (docs/performance.md#the-go-runtimes-start).
//go:debug updatemaxprocs=0

// Command sriov is the CDI exec plugin that partitions SR-IOV physical
// functions into virtual functions and hands VFs out, chain-loading a
// delegate plugin (such as drm) for their device nodes or handing out their
// VFIO groups. The chaining contract is docs/chaining.md.
package main

import "github.com/cdi-exec/plugins/pkg/skel"

func main() { skel.Main(about) }
