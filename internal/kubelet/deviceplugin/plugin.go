// Package deviceplugin is the device-plugin mode of cdi-kubelet-plugin: it
// makes the resource types configured for the exec plugins kubelet
// device-plugin resources (v1beta1). Each type becomes one resource
// <prefix>/<type>, served by an Endpoint (endpoint.go, server.go). Devices
// come from the plugins' DEVICES answers, read by the rules the DRA mode
// shares (internal/kubelet/inventory); Allocate is a pinned ADD under a
// request-id made from the device set (reqid.go), and because the
// device-plugin API never frees anything, the mode frees what the
// kubelet's PodResources API no longer lists (podresources.go, gc.go,
// collect.go). The spec files of what the kubelet holds are put back when
// they go (heal.go). Every call to a plugin goes through pkg/caller.
// docs/kubernetes.md describes it.
package deviceplugin

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

	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
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

// Options configure a Plugin.
type Options struct {
	ConfDir    string   // the plugin configs, <type>.d/*.conf
	Types      []string // serve only these types; all when empty
	Prefix     string   // resource names are <Prefix>/<type>
	KubeletDir string   // the kubelet's root directory
	CDISpecDir string   // where specs go for configs without cdi_spec
	Caller     caller.Caller
	Poll       time.Duration // how often DEVICES is asked
	GCInterval time.Duration // how often PodResources is scanned
	Grace      time.Duration // see gc.go
	Watch      time.Duration // how often a kubelet restart is checked for
	// ClaimStateDir is the DRA mode's claim records (its --state-dir):
	// the claims it prepared of a type that moved to this mode are freed
	// once no pod uses them (claims.go). Empty: none are.
	ClaimStateDir string
	Log           *slog.Logger
	// Metrics records the devices published, the allocations freed and
	// failed polls; New makes its own when it is nil.
	Metrics *metrics.Metrics
}

// Plugin serves the configured resource types.
type Plugin struct {
	opt     Options
	log     *slog.Logger
	res     []*resource
	plugins []*Endpoint // serving res, in the same order
}

// New loads the configs and prepares one resource per type.
func New(opt Options) (*Plugin, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New()
	}
	// One VERSION per plugin binary, not per call.
	opt.Caller = opt.Caller.WithNegotiatedVersions()
	byType, probs, err := inventory.Configs(opt.ConfDir, opt.Types, opt.Prefix, opt.CDISpecDir)
	inventory.LogProblems(opt.Log, probs)
	if err != nil {
		return nil, err
	}
	b := &Plugin{opt: opt, log: opt.Log}
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		r := newResource(opt.Prefix+"/"+t, t, byType[t], opt.Caller, opt.Log, opt.Metrics, opt.Grace)
		r.claims = b.claimRecords(t)
		b.res = append(b.res, r)
		b.plugins = append(b.plugins, &Endpoint{
			Resource: r.name, Dir: b.pluginDir(), Socket: Socket(r.name), Backend: r,
			Log: b.log, Watch: b.opt.Watch, OnRegister: b.onRegister(r),
		})
	}
	return b, nil
}

// Checks returns the resources' device plugins as the probes see them.
func (b *Plugin) Checks() []probe.Check {
	var out []probe.Check
	for _, p := range b.plugins {
		out = append(out, p)
	}
	return out
}

// Resources returns the names of the resources served.
func (b *Plugin) Resources() []string {
	var names []string
	for _, r := range b.res {
		names = append(names, r.name)
	}
	return names
}

func (b *Plugin) pluginDir() string    { return filepath.Join(b.opt.KubeletDir, "device-plugins") }
func (b *Plugin) podResources() string { return filepath.Join(b.opt.KubeletDir, podgc.Socket) }

// Socket returns the file name of a resource's socket in the kubelet's
// device-plugins directory: "cdi-exec.io-tty.sock" for "cdi-exec.io/tty".
func Socket(resource string) string {
	return strings.ReplaceAll(resource, "/", "-") + ".sock"
}

// Run serves every resource until ctx ends, then removes the sockets. It
// lists every resource's devices before the first registration, so that
// the kubelet's first ListAndWatch is complete.
func (b *Plugin) Run(ctx context.Context) error {
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
		heal := b.healer(r)
		wg.Add(3)
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
		go func() {
			defer wg.Done()
			heal.Run(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		inventory.Every(ctx, b.opt.GCInterval, nil, func() { _ = b.collect(ctx, time.Now()) })
	}()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("device plugin: %w", err)
	}
	return nil
}

// onRegister makes a kubelet restart start every absence count afresh: a
// kubelet that has just started may list no pods for a while.
func (b *Plugin) onRegister(r *resource) func(bool) {
	return func(again bool) {
		if again {
			r.gc.Reset()
			r.claimGC.Reset()
		}
	}
}
