// Package dra serves the resource types configured for the exec plugins
// as Kubernetes Dynamic Resource Allocation drivers (resource.k8s.io/v1):
// one driver <type>.<suffix> per type, each registered with the kubelet
// through its plugin registration directory.
//
// The protocol maps onto DRA almost one to one: the plugins' DEVICES
// answers become the driver's ResourceSlice (device names from
// internal/kubelet/devname), NodePrepareResources is a pinned ADD of the
// allocated devices with the claim's UID as request-id, and
// NodeUnprepareResources is DEL of that UID. Each allocated device gets
// its own CDI device, so a container gets the devices of the requests it
// names; devices allocated with admin access get a CDI spec the driver
// writes itself, without an ADD (admin.go). A published device that turns
// unusable stays in the slice with a taint, and the kubelet's health
// stream reports it Unhealthy (slice.go, health.go). A claim's opaque
// DeviceConfig sets plugin args for its ADD (internal/kubelet/claimconfig).
// The claims a driver has prepared are recorded in its own state file
// (internal/kubelet/claimstate); a prepared claim whose ResourceClaim is gone,
// or has another UID, is freed after a grace period. docs/kubernetes.md
// describes it.
package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/modelock"
	"github.com/cdi-exec/plugins/internal/kubelet/probe"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// Defaults of the Options.
const (
	DefaultSuffix        = "cdi-exec.io"
	DefaultClaimStateDir = "/var/lib/cdi-kubelet-plugin"
	DefaultPoll          = 5 * time.Second
	// DefaultWaitLog is how often a driver that the kubelet has not
	// registered says so.
	DefaultWaitLog       = 30 * time.Second
	DefaultStaleInterval = time.Minute
	// DefaultStaleGrace is how long a claim must have been gone before
	// its devices are freed: the kubelet unprepares a deleted pod's claims
	// itself within seconds, so the collector only acts on what the
	// kubelet could not (a node that was down, a driver that was away).
	DefaultStaleGrace = 2 * time.Minute
)

// Options configure a Plugin.
type Options struct {
	NodeName      string               // the node, the pool name of every slice
	Client        kubernetes.Interface // for ResourceClaims and ResourceSlices
	ConfDir       string               // the plugin configs, <type>.d/*.conf
	Types         []string             // serve only these types; all when empty
	Suffix        string               // driver names are <type>.<Suffix>
	KubeletDir    string               // the kubelet's root directory
	CDISpecDir    string               // where specs go for configs without cdi_spec
	ClaimStateDir string               // the drivers' claim records (--state-dir)
	// PluginStateDir is the plugins' state directory (CDI_STATE_DIR),
	// where the lock that keeps the device-plugin mode off these types
	// lives.
	PluginStateDir string
	// PodUID, the UID of the driver's own pod, enables rolling updates:
	// the old and the new pod serve side by side for a while.
	PodUID string
	Caller caller.Caller
	Poll   time.Duration // how often DEVICES is asked
	// WaitLog is how often a driver the kubelet has not registered yet
	// says so (one log line naming its registration socket); zero means
	// DefaultWaitLog.
	WaitLog       time.Duration
	StaleInterval time.Duration // how often prepared claims are checked
	StaleGrace    time.Duration // how long a claim must be gone before it is freed
	// TaintEffect is the effect of the taint an unusable device gets:
	// NoSchedule (the default) or NoExecute.
	TaintEffect resourceapi.DeviceTaintEffect
	// HostRoot is the plugins' host root (CDI_HOST_ROOT), where the
	// device numbers of admin-access specs are read.
	HostRoot string
	Log      *slog.Logger
	// Metrics records prepares, unprepares, published devices, freed
	// claims and failed polls; New makes its own when it is nil.
	Metrics *metrics.Metrics
	// Events, when set, records Kubernetes Events on ResourceClaims: a
	// failed prepare, a claim record the driver refuses to replace, a
	// stale claim freed. Each driver reports as the controller named
	// after it.
	Events events.EventBroadcaster
	// ClaimStatus writes each prepared claim's status.devices (KEP-4817):
	// a Ready condition and the device's facts per device of ours.
	ClaimStatus bool
	// DeviceMetadata has the kubelet plugin helper write each prepared
	// request's device metadata (KEP-5304) and a CDI spec, in CDISpecDir,
	// that mounts it into the containers under
	// /var/run/kubernetes.io/dra-device-attributes/.
	DeviceMetadata bool
}

// Plugin is the set of drivers of one node.
type Plugin struct {
	opt     Options
	log     *slog.Logger
	drivers []*driver
	// podResourcesFailing is whether the last list of the kubelet's pod
	// resources failed (migrate.go); only the collector's goroutine uses it.
	podResourcesFailing bool
}

// errFatal marks a failure that stops Run.
var errFatal = errors.New("DRA driver failed")

// New loads the configs and prepares one driver per type.
func New(opt Options) (*Plugin, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.TaintEffect == "" {
		opt.TaintEffect = resourceapi.DeviceTaintEffectNoSchedule
	}
	if opt.Poll <= 0 {
		opt.Poll = DefaultPoll
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New()
	}
	// One VERSION per plugin binary, not per call.
	opt.Caller = opt.Caller.WithNegotiatedVersions()
	byType, probs, err := inventory.Configs(opt.ConfDir, opt.Types, opt.Suffix, opt.CDISpecDir)
	inventory.LogProblems(opt.Log, probs)
	if err != nil {
		return nil, err
	}
	p := &Plugin{opt: opt, log: opt.Log}
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		d, err := newDriver(t, byType[t], opt)
		if err != nil {
			return nil, err
		}
		p.drivers = append(p.drivers, d)
	}
	return p, nil
}

// Drivers returns the names of the drivers served.
func (p *Plugin) Drivers() []string {
	var names []string
	for _, d := range p.drivers {
		names = append(names, d.name)
	}
	return names
}

// Checks returns the drivers as the probes see them.
func (p *Plugin) Checks() []probe.Check {
	var out []probe.Check
	for _, d := range p.drivers {
		out = append(out, d)
	}
	return out
}

// Run serves every driver until ctx ends, then stops them: their sockets
// go, their slices and prepared claims stay. It fails at once when the
// device-plugin mode serves one of the types on this node.
func (p *Plugin) Run(ctx context.Context) error {
	var types []string
	for _, d := range p.drivers {
		types = append(types, d.typ)
	}
	lock, err := modelock.Acquire(ctx, p.opt.PluginStateDir, modelock.DRA, types)
	if err != nil {
		return err
	}
	defer lock.Release()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(p.log.Handler()))
	fatal := func(err error) { cancel(fmt.Errorf("%w: %w", errFatal, err)) }
	if _, err := os.Stat(p.opt.KubeletDir); err != nil {
		p.log.Warn("the kubelet's root directory is not there: its plugin directories are made, and the drivers wait for a kubelet to register the drivers",
			"dir", p.opt.KubeletDir, "expected", "a running kubelet whose --root-dir is --kubelet-dir, mounted into this container")
	}
	// The drivers start at once: each one's slice controller waits about
	// a second for its informer, so one after another a node of three
	// types published its last slice three seconds after its first.
	starts := make([]error, len(p.drivers))
	var started sync.WaitGroup
	for i, d := range p.drivers {
		started.Go(func() {
			d.refresh(ctx)
			if starts[i] = d.start(ctx, p.opt, fatal); starts[i] == nil {
				p.log.Info("serving", "driver", d.name, "configs", len(d.lifecycle.confs), "devices", d.publisher.devices())
			}
		})
	}
	started.Wait()
	if err := errors.Join(starts...); err != nil {
		p.stop()
		if ctx.Err() != nil { // stopped while starting
			return p.cause(ctx)
		}
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		inventory.Every(ctx, p.opt.StaleInterval, nil, func() { p.collectLeftovers(ctx, time.Now()) })
	}()
	waitLog := p.opt.WaitLog
	if waitLog <= 0 {
		waitLog = DefaultWaitLog
	}
	for _, d := range p.drivers {
		wg.Add(4)
		go func() {
			defer wg.Done()
			d.awaitKubelet(ctx, waitLog, p.opt.KubeletDir)
		}()
		go func() {
			defer wg.Done()
			d.poll(ctx, p.opt.Poll)
		}()
		go func() {
			defer wg.Done()
			d.lifecycle.status.run(ctx)
		}()
		go func() {
			defer wg.Done()
			d.lifecycle.collectEvery(ctx, p.opt.StaleInterval)
		}()
		wg.Go(func() { d.lifecycle.healer().Run(ctx) })
	}
	<-ctx.Done()
	p.stop()
	wg.Wait()
	return p.cause(ctx)
}

// cause is what Run returns once ctx has ended: the failure that ended
// it, or nil when it was asked to stop.
func (p *Plugin) cause(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, errFatal) {
		return cause
	}
	return nil
}

// stop stops every driver's gRPC services and slice publishing.
func (p *Plugin) stop() {
	for _, d := range p.drivers {
		d.stop()
	}
}
