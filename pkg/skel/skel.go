// Package skel is the plugin side of the CDI exec protocol: it reads the
// environment and the config on stdin, applies the version rules and the
// order of checks, calls the plugin, and prints exactly one JSON object with
// the right exit status. What both sides share (codes, versions, the config,
// the error type) is in pkg/protocol.
//
// Environment, stdin, stdout and stderr are injected through Dispatcher, so
// the whole protocol is testable in-process; Main wires them to the process.
package skel

import (
	"context"
	"fmt"
	"io"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"

	// Every plugin runs skel.Main: its main goroutine gets its whole stack
	// before any package initialises.
	_ "github.com/cdi-exec/plugins/internal/stack"
)

// Call is one validated invocation, handed to the plugin.
type Call struct {
	Command   string // upper case
	Version   string // the protocol version of the reply
	Config    protocol.Config
	Env       protocol.Env
	RequestID string          // ADD, DEL
	Request   request.Request // ADD
	// Locality lists the requested NUMA nodes; it is nil when
	// CDI_REQUEST_NUMA_LOCALITY was not given.
	Locality []int
	// Pinned lists the device keys of a pinned ADD, in the caller's
	// order; it is nil when CDI_REQUEST_DEVICES was not given.
	Pinned []string
	// ValidIDs is the set of request-ids a GC must keep.
	ValidIDs map[string]bool
	// Owner is the ADD's CDI_REQUEST_OWNER; empty when not given.
	Owner string
	// KeepOwners is the set of owners whose records a GC keeps
	// (CDI_GC_KEEP_OWNERS); nil when not given.
	KeepOwners map[string]bool
	// Stderr receives warnings meant for logs.
	Stderr io.Writer
}

// Warnf writes one warning line to stderr.
func (c *Call) Warnf(format string, args ...any) {
	if c.Stderr != nil {
		fmt.Fprintf(c.Stderr, "%s: warning: %s\n", c.Config.Plugin, fmt.Sprintf(format, args...))
	}
}

// AddResult is the answer to a successful ADD.
type AddResult struct {
	Devices []string
	// NUMA lists the NUMA nodes close to the allocated devices. It is
	// printed only when the caller asked for locality.
	NUMA []int
	// CDIDevices are fully qualified modern CDI device names, printed when
	// not empty.
	CDIDevices []string
	// CDIKeyDevices name each device's own CDI device by its key
	// (cdispec.KeyDeviceName), printed with CDIDevices.
	CDIKeyDevices map[string]string
}

// GCResult is the answer to a GC.
type GCResult struct {
	Freed  []string // request-ids whose allocations were freed
	Errors []string // per-id failures, for logging
}

// Plugin implements the commands of one plugin for one config.
type Plugin interface {
	Info(ctx context.Context, c *Call) (map[string]int, error)
	Add(ctx context.Context, c *Call) (*AddResult, error)
	Del(ctx context.Context, c *Call) error
}

// Collector is implemented by plugins that support the GC extension.
type Collector interface {
	GC(ctx context.Context, c *Call) (*GCResult, error)
}

// Inventorier is implemented by plugins that support the DEVICES
// extension: every device they see, usable or not, and who holds it.
type Inventorier interface {
	Devices(ctx context.Context, c *Call) ([]protocol.DeviceInfo, error)
}

// About describes a plugin to the engine.
type About struct {
	// Name is the plugin's binary name.
	Name string
	// Summary says in a few words what the plugin hands out, for a person
	// who runs it by hand.
	Summary string
	// Subtypes lists the resource-subtypes ADD accepts besides the bare
	// type.
	Subtypes []string
	// SharedKeys lets a pinned ADD name a key more than once, each time
	// one more share of a device several requests may hold at once
	// (docs/protocol.md#extension-pinned-add); without it a key named
	// twice is code 102.
	SharedKeys bool
	// New validates the config's args and returns the plugin. Its errors
	// are reported as invalid configuration (code 101) unless they already
	// carry a code.
	New func(c *Call) (Plugin, error)
}
