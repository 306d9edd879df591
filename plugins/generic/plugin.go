package main

import (
	"github.com/cdi-exec/plugins/internal/chardev"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/skel"
)

const name = "generic"

// about: a pinned ADD may name a shared unit once per share it wants
// (SharedKeys).
var about = skel.About{Name: name, Summary: "hands the device nodes its rules select to containers", SharedKeys: true, New: newPlugin}

// plugin is the rules' engine (internal/chardev) under pool.Pool. Share i
// of a unit is its store key pool.ShareKey(key, i). The engine counts
// INFO's capacity itself (a unit of unlimited shares lists only the
// shares an ADD can use).
type plugin struct {
	pool.Pool
}

func newPlugin(c *skel.Call) (skel.Plugin, error) {
	var a args
	spec, err := pool.Args(c.Config, &a)
	if err != nil {
		return nil, err // skel words it, placed at its member
	}
	cfg, err := a.validate()
	if err != nil {
		return nil, err
	}
	e := chardev.New(c.Env.HostRoot, cfg.rules)
	return &plugin{pool.Pool{Name: name, Spec: spec, Strict: cfg.strict,
		Discoverer: e, Counter: e, Lister: e, Placer: e, Permitter: e}}, nil
}
