// Command drm is the CDI exec plugin that hands whole GPUs to containers as
// their Linux DRM device nodes (/dev/dri/cardN, /dev/dri/renderDN).
package main

import "github.com/cdi-exec/plugins/pkg/skel"

func main() { skel.Main(about) }
