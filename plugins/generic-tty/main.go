// Command generic-tty is the CDI exec plugin that hands out tty device nodes
// (virtual consoles by default, or another family such as ttyS or ttyUSB).
package main

import "github.com/cdi-exec/plugins/pkg/skel"

func main() { skel.Main(about) }
