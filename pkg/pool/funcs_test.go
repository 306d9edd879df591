package pool

import (
	"context"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// Plugins implement the pool's interfaces with methods; the tests give
// functions, through these adapters.

type discoverFunc func(ctx context.Context, c *skel.Call, scan Scan) ([]Device, error)

func (f discoverFunc) Discover(ctx context.Context, c *skel.Call, scan Scan) ([]Device, error) {
	return f(ctx, c, scan)
}

type listFunc func(ctx context.Context, c *skel.Call) ([]protocol.DeviceInfo, error)

func (f listFunc) Inventory(ctx context.Context, c *skel.Call) ([]protocol.DeviceInfo, error) {
	return f(ctx, c)
}

type resolveFunc func() ([]string, error)

func (f resolveFunc) Resolve() ([]string, error) { return f() }

// setupFuncs is a Setup; a nil teardown tears nothing down.
type setupFuncs struct {
	handout  func(ctx context.Context, c *skel.Call, item request.Item, chosen []Device) (Handout, error)
	teardown func(ctx context.Context, c *skel.Call, rec Record) error
}

func (s setupFuncs) Handout(ctx context.Context, c *skel.Call, item request.Item, chosen []Device) (Handout, error) {
	return s.handout(ctx, c, item, chosen)
}

func (s setupFuncs) Teardown(ctx context.Context, c *skel.Call, rec Record) error {
	if s.teardown == nil {
		return nil
	}
	return s.teardown(ctx, c, rec)
}
