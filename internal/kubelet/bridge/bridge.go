// Package bridge makes the resource types configured for the exec plugins
// kubelet device-plugin resources. Each type becomes one resource
// <prefix>/<type>, served by a deviceplugin.Plugin. Devices come from the
// plugins' DEVICES answers, Allocate is a pinned ADD, and because the
// device-plugin API never frees anything, the bridge frees what the
// kubelet's PodResources API no longer lists (internal/kubelet/gc). Every call
// to a plugin goes through pkg/caller. docs/kubernetes.md describes it.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/probe"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// Defaults of the Options.
const (
	DefaultPrefix     = "cdi-exec.io"
	DefaultKubeletDir = "/var/lib/kubelet"
	DefaultPoll       = 5 * time.Second
	DefaultGCInterval = 30 * time.Second
	// DefaultGrace is longer than a pod's default termination grace
	// period (30 s), so that a container still stopping keeps its devices.
	DefaultGrace = 2 * time.Minute
)

// Options configure a Bridge.
type Options struct {
	ConfDir    string   // the plugin configs, <type>.d/*.conf
	Types      []string // serve only these types; all when empty
	Prefix     string   // resource names are <Prefix>/<type>
	KubeletDir string   // the kubelet's root directory
	CDISpecDir string   // where specs go for configs without cdi_spec
	Caller     caller.Caller
	Poll       time.Duration // how often DEVICES is asked
	GCInterval time.Duration // how often PodResources is scanned
	Grace      time.Duration // see internal/kubelet/gc
	Watch      time.Duration // how often a kubelet restart is checked for
	Log        *slog.Logger
	// Metrics records the devices published, the allocations freed and
	// failed polls; New makes its own when it is nil.
	Metrics *metrics.Metrics
}

// Bridge serves the configured resource types.
type Bridge struct {
	opt     Options
	log     *slog.Logger
	res     []*resource
	plugins []*deviceplugin.Plugin // serving res, in the same order
}

// New loads the configs and prepares one resource per type.
func New(opt Options) (*Bridge, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New()
	}
	byType, probs, err := Configs(opt.ConfDir, opt.Types, opt.Prefix, opt.CDISpecDir)
	LogProblems(opt.Log, probs)
	if err != nil {
		return nil, err
	}
	b := &Bridge{opt: opt, log: opt.Log}
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		r := newResource(opt.Prefix+"/"+t, t, byType[t], opt.Caller, opt.Log, opt.Metrics, opt.Grace)
		b.res = append(b.res, r)
		b.plugins = append(b.plugins, &deviceplugin.Plugin{
			Resource: r.name, Dir: b.pluginDir(), Socket: Socket(r.name), Backend: r,
			Log: b.log, Watch: b.opt.Watch, OnRegister: b.onRegister(r),
		})
	}
	return b, nil
}

// Checks returns the resources' device plugins as the probes see them.
func (b *Bridge) Checks() []probe.Check {
	var out []probe.Check
	for _, p := range b.plugins {
		out = append(out, p)
	}
	return out
}

// Resources returns the names of the resources served.
func (b *Bridge) Resources() []string {
	var names []string
	for _, r := range b.res {
		names = append(names, r.name)
	}
	return names
}

func (b *Bridge) pluginDir() string    { return filepath.Join(b.opt.KubeletDir, "device-plugins") }
func (b *Bridge) podResources() string { return filepath.Join(b.opt.KubeletDir, podResourcesSocket) }

// Socket returns the file name of a resource's socket in the kubelet's
// device-plugins directory: "cdi-exec.io-tty.sock" for "cdi-exec.io/tty".
func Socket(resource string) string {
	return strings.ReplaceAll(resource, "/", "-") + ".sock"
}

// Run serves every resource until ctx ends, then removes the sockets. It
// lists every resource's devices before the first registration, so that
// the kubelet's first ListAndWatch is complete.
func (b *Bridge) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, r := range b.res {
		r.refresh(ctx)
		b.log.Info("serving", "resource", r.name, "configs", len(r.confs), "devices", len(r.devs))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(b.res))
	for i, r := range b.res {
		p := b.plugins[i]
		wg.Add(2)
		go func() {
			defer wg.Done()
			if errs[i] = p.Run(ctx); errs[i] != nil {
				cancel()
			}
		}()
		go func() {
			defer wg.Done()
			r.poll(ctx, b.opt.Poll)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, b.opt.GCInterval, nil, func() { _ = b.collect(ctx, time.Now()) })
	}()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("device plugin: %w", err)
	}
	return nil
}

// onRegister makes a kubelet restart start every absence count afresh: a
// kubelet that has just started may list no pods for a while.
func (b *Bridge) onRegister(r *resource) func(bool) {
	return func(again bool) {
		if again {
			r.gc.Reset()
		}
	}
}
