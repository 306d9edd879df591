package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	metadatav1alpha1 "k8s.io/dynamic-resource-allocation/api/metadata/v1alpha1"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/internal/unixsock"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// driver is one resource type served as a DRA driver: what the kubelet
// sees of it (its sockets, its registration) over its two parts, each the
// one owner of its state: the publisher, which offers the node's devices
// in the driver's ResourceSlices (slice.go, health.go), and the
// lifecycle, which prepares and unprepares the claims allocated them and
// keeps their records (prepare.go, stale.go, status.go, admin.go,
// migrate.go). It implements kubeletplugin.DRAPlugin.
type driver struct {
	name string // "<type>.<suffix>"
	typ  string
	log  *slog.Logger
	// regSock and draSock are the helper's sockets: its registration
	// socket, which the kubelet's plugin watcher finds, and its DRA
	// service.
	regSock, draSock string
	metadata         bool // prepared devices carry their metadata (KEP-5304)

	publisher *publisher
	lifecycle *lifecycle

	mu     sync.Mutex
	helper *kubeletplugin.Helper // set by start
	// registration is the kubelet's last word on the driver's
	// registration (noteRegistration), nil before it came.
	registration *registerapi.RegistrationStatus
	fatal        func(error) // stops Run; set by start, before the helper serves
}

// publisher offers the node's devices of one type: it asks the plugins
// for them (the poller, which it alone refreshes), turns them into slice
// devices, taints those that turn unusable, hands them to the helper's
// slice controller, and streams their health to the kubelet.
type publisher struct {
	name, node string
	effect     resourceapi.DeviceTaintEffect // of the taint of unusable devices
	every      time.Duration                 // how often DEVICES is asked
	client     kubernetes.Interface          // to look the slices up (Ready)
	poller     *inventory.Poller
	log        *slog.Logger
	metrics    *metrics.Metrics

	mu        sync.Mutex
	helper    *kubeletplugin.Helper // set by start
	offered   []resourceapi.Device  // what the slice lists
	published bool                  // offered handed to the slice controller
	written   bool                  // the API server was seen with offered (Ready)
	sliceErr  error                 // the slice controller's last failure, until Ready sees the slices written
	unnamed   map[string]bool       // keys already warned about
	// known are the devices ever offered, by name, as last offered
	// untainted; unhealthy those of them now unusable or gone.
	known     map[string]resourceapi.Device
	unhealthy map[string]unhealthy
	refreshed time.Time     // when the devices were last asked
	changed   chan struct{} // closed and replaced when offered changes
	// consumable is whether the API server is taken to serve consumable
	// capacity (KEP-5075): a shared unit is then one device of N shares,
	// else N devices. True until the server drops a device's
	// allowMultipleAllocations (dropped).
	consumable bool
	poke       chan struct{} // wakes the poll (dropped)
	// podsEvery is how often, at most, the node's allocatable pods are
	// read while a unit of unlimited shares exists (podsOfNode);
	// podsRead when they were last asked for, podsFailing whether that
	// failed (logged once).
	podsEvery   time.Duration
	podsRead    time.Time
	podsFailing bool
}

// lifecycle prepares and unprepares the claims allocated devices of one
// type on this node, records them, writes their status and metadata, and
// frees those whose ResourceClaim went away (the stale-claim collector)
// or that the device-plugin mode left behind (migrate.go). It reads the
// devices through the publisher's poller and never refreshes it.
type lifecycle struct {
	name, typ, node string
	confs           []caller.Config
	caller          caller.Caller
	client          kubernetes.Interface // claims by name, never a list or watch
	records         *claimstate.File     // the claims prepared, by UID
	poller          *inventory.Poller    // the publisher's, read only
	grace           time.Duration
	// hostRoot is where the host's /dev and /sys are (CDI_HOST_ROOT), for
	// the device numbers of admin-access specs.
	hostRoot string
	log      *slog.Logger
	metrics  *metrics.Metrics
	recorder events.EventRecorder // nil: no events
	status   *statusWriter        // claims' status.devices (status.go); nil: not written
	metadata bool                 // prepared devices carry their metadata (KEP-5304)
	// metadataDir is the helper's plugin data directory, where it keeps
	// the metadata files, and cdiDir where it writes the specs that mount
	// them (restore.go).
	metadataDir, cdiDir string
	// leftovers are the device-plugin mode's ids of the type (migrate.go).
	leftovers leftovers

	mu        sync.Mutex
	preparing map[string]bool      // claim UIDs whose prepare runs (pin)
	missing   map[string]time.Time // claim UID → first scan that found it gone
}

func newDriver(typ string, confs []caller.Config, opt Options) (*driver, error) {
	name := typ + "." + opt.Suffix
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > resourceapi.DriverNameMaxLength {
		return nil, fmt.Errorf("resource type %q: the driver name %q is not a DNS subdomain of at most %d characters (%v)", typ, name, resourceapi.DriverNameMaxLength, errs)
	}
	records, err := claimstate.Open(opt.ClaimStateDir, name)
	if err != nil {
		return nil, err
	}
	var rec events.EventRecorder
	if opt.Events != nil {
		rec = opt.Events.NewRecorder(scheme.Scheme, name)
	}
	log := opt.Log.With("driver", name)
	var status *statusWriter
	if opt.ClaimStatus && opt.Client != nil {
		status = newStatusWriter(opt.Client, name, log)
	}
	poller := inventory.NewPoller(opt.Caller, confs, log)
	reg, dra := sockets(opt.KubeletDir, name, opt.PodUID)
	return &driver{
		name: name, typ: typ, log: log, regSock: reg, draSock: dra, metadata: opt.DeviceMetadata,
		publisher: &publisher{
			name: name, node: opt.NodeName, effect: opt.TaintEffect, every: opt.Poll, client: opt.Client,
			poller: poller, log: log, metrics: opt.Metrics,
			unnamed: map[string]bool{}, known: map[string]resourceapi.Device{}, unhealthy: map[string]unhealthy{},
			changed: make(chan struct{}), consumable: true, poke: make(chan struct{}, 1), podsEvery: podsEvery,
		},
		lifecycle: &lifecycle{
			name: name, typ: typ, node: opt.NodeName, confs: confs, caller: opt.Caller, client: opt.Client,
			records: records, poller: poller, grace: opt.StaleGrace, hostRoot: opt.HostRoot,
			log: log, metrics: opt.Metrics, recorder: rec, status: status, metadata: opt.DeviceMetadata,
			metadataDir: filepath.Dir(dra), cdiDir: opt.CDISpecDir,
			leftovers: leftovers{resource: opt.Suffix + "/" + typ, tracker: podgc.NewTracker(opt.StaleGrace)},
			preparing: map[string]bool{}, missing: map[string]time.Time{},
		},
	}, nil
}

// start registers the driver with the kubelet and publishes its slice.
func (d *driver) start(ctx context.Context, opt Options, fatal func(error)) error {
	dataDir, regDir := filepath.Dir(d.draSock), filepath.Dir(d.regSock)
	for _, dir := range []string{dataDir, regDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("driver %s: %w", d.name, err)
		}
	}
	for _, p := range []string{d.regSock, d.draSock} {
		if err := unixsock.Check(p); err != nil {
			return fmt.Errorf("driver %s: %w: use a shorter --kubelet-dir, --driver-suffix or type", d.name, err)
		}
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(d.name),
		kubeletplugin.NodeName(d.publisher.node),
		kubeletplugin.KubeClient(d.publisher.client),
		kubeletplugin.RegistrarDirectoryPath(regDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		// Claims are prepared at once, each call under its claims' own
		// locks (oneCallPerClaim): a batch of pods does not queue behind
		// one prepare at a time.
		kubeletplugin.Serialize(false),
		kubeletplugin.GRPCInterceptor(d.oneCallPerClaim),
		kubeletplugin.GRPCInterceptor(d.noteRegistration),
	}
	if opt.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(opt.PodUID)))
	}
	if d.metadata {
		opts = append(opts,
			// Every version the library has, oldest first: KubeVirt
			// decodes only v1alpha1 objects of the stream, newer readers
			// v1beta1.
			kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1alpha1.SchemeGroupVersion, metadatav1beta1.SchemeGroupVersion}),
			kubeletplugin.MetadataFileOps(kubeletplugin.MetadataFileOperations{WriteFile: writeMetadataFile}),
			kubeletplugin.CDIDirectory(opt.CDISpecDir))
	}
	d.mu.Lock()
	d.fatal = fatal
	d.mu.Unlock()
	h, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("driver %s: %w", d.name, err)
	}
	d.mu.Lock()
	d.helper = h
	d.mu.Unlock()
	return d.publisher.start(ctx, h)
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: the
// lifecycle prepares each claim.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return d.lifecycle.PrepareResourceClaims(ctx, claims)
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: the
// lifecycle unprepares each claim.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return d.lifecycle.UnprepareResourceClaims(ctx, claims)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: the publisher's
// health stream of the devices it offers.
func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return d.publisher.WatchHealthStatus(ctx, reports)
}

// refresh asks the plugins for their devices and publishes the slice
// when what the driver offers changed.
func (d *driver) refresh(ctx context.Context) {
	d.publisher.refresh(ctx, d.lifecycle)
}

// poll refreshes the devices every interval until ctx ends.
func (d *driver) poll(ctx context.Context, interval time.Duration) {
	inventory.Every(ctx, interval, d.publisher.poke, func() { d.refresh(ctx) })
}

// oneCallPerClaim is the helper's gRPC interceptor: a
// NodePrepareResources or NodeUnprepareResources call holds the lock of
// each of its claims (claimstate.LockClaims) from the helper's GET of the
// claim to the metadata files it writes or removes after the driver's
// answer. The calls of one claim take turns, in this process and in the
// other pod of a rolling update (a kubelet that timed out and asks again,
// two pods of one shared claim), while those of different claims run at
// once. A call that cannot take its locks before its context ends fails
// whole, and the kubelet asks again. Each call is logged with its time,
// from the lock to the metadata files: the kubelet's call less its
// transport (make bench-k8s reads its p99).
func (d *driver) oneCallPerClaim(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	uids := claimUIDs(req)
	if len(uids) == 0 {
		return handler(ctx, req)
	}
	start := time.Now()
	unlock, err := d.lifecycle.records.LockClaims(ctx, uids)
	if err != nil {
		return nil, err
	}
	defer unlock()
	resp, err := handler(ctx, req)
	log := d.log.With("method", path.Base(info.FullMethod), "claims", len(uids), "took", time.Since(start).Round(100*time.Microsecond))
	if err != nil {
		log.Error("call failed", "err", err)
	} else {
		log.Info("call")
	}
	return resp, err
}

// noteRegistration is the helper's gRPC interceptor that keeps what the
// kubelet's plugin watcher says of the registration (NotifyRegistrationStatus)
// under the driver's lock, for awaitKubelet: the helper's own
// RegistrationStatus reads its field without a lock.
func (d *driver) noteRegistration(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if st, ok := req.(*registerapi.RegistrationStatus); ok {
		d.mu.Lock()
		d.registration = &registerapi.RegistrationStatus{PluginRegistered: st.PluginRegistered, Error: st.Error}
		d.mu.Unlock()
	}
	return handler(ctx, req)
}

// claimUIDs are the claim UIDs of a prepare or unprepare call, of either
// version of the kubelet's DRA API; none for any other call.
func claimUIDs(req any) []string {
	switch r := req.(type) {
	case *drapb.NodePrepareResourcesRequest:
		return uidsOf(r.Claims)
	case *drapb.NodeUnprepareResourcesRequest:
		return uidsOf(r.Claims)
	case *drapbv1beta1.NodePrepareResourcesRequest:
		return uidsOf(r.Claims)
	case *drapbv1beta1.NodeUnprepareResourcesRequest:
		return uidsOf(r.Claims)
	}
	return nil
}

// uidsOf are the UIDs of the claims of a request.
func uidsOf[C interface{ GetUid() string }](claims []C) []string {
	out := make([]string, 0, len(claims))
	for _, c := range claims {
		out = append(out, c.GetUid())
	}
	return out
}

// sockets returns the paths of the helper's sockets under the kubelet's
// directory: the registration socket <kubelet>/plugins_registry/<driver>-reg.sock
// and the DRA service <kubelet>/plugins/<driver>/dra.sock. With a pod UID
// (rolling updates) both names carry it, <driver>-<pod UID>-reg.sock,
// which leaves a driver name of at most 27 characters under
// /var/lib/kubelet (start refuses longer paths).
func sockets(kubeletDir, driver, podUID string) (reg, dra string) {
	uid := ""
	if podUID != "" {
		uid = "-" + podUID
	}
	return filepath.Join(kubeletDir, "plugins_registry", driver+uid+"-reg.sock"),
		filepath.Join(kubeletDir, "plugins", driver, "dra"+uid+".sock")
}

// stop stops the helper: the sockets go, so the kubelet stops calling.
func (d *driver) stop() {
	d.mu.Lock()
	h := d.helper
	d.mu.Unlock()
	h.Stop()
}

// HandleError implements kubeletplugin.DRAPlugin: errors of the
// background work (serving gRPC, publishing slices). Those the helper
// calls recoverable are logged, and so are fields the API server dropped
// from the slice (device taints where DRADeviceTaints is off; a dropped
// allowMultipleAllocations turns the publisher to one device per share);
// any other stops the driver.
func (d *driver) HandleError(_ context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		d.log.Warn(msg, "err", err)
		d.publisher.dropped(dropped)
		return
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		// The slice controller failed to write the slices (it retries):
		// not ready until they are seen written.
		d.publisher.failed(err)
		d.log.Warn(msg, "err", err)
		return
	}
	d.log.Error(msg, "err", err)
	d.mu.Lock()
	fatal := d.fatal
	d.mu.Unlock()
	fatal(fmt.Errorf("driver %s: %s: %w", d.name, msg, err))
}

// awaitKubelet says, every interval until the kubelet has registered the
// driver, that it waits for that: one log line naming the registration
// socket the kubelet should find and the directory it should watch. It
// says once when the registration came.
func (d *driver) awaitKubelet(ctx context.Context, interval time.Duration, kubeletDir string) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	waited := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d.mu.Lock()
		st := d.registration
		d.mu.Unlock()
		if st != nil && st.PluginRegistered {
			if waited {
				d.log.Info("registered with the kubelet", "socket", d.regSock)
			}
			return
		}
		waited = true
		if st != nil {
			d.log.Warn("the kubelet refused the driver's registration: waiting for it to try again", "socket", d.regSock, "err", st.Error)
			continue
		}
		d.log.Warn("the kubelet has not registered the driver yet: waiting for it",
			"socket", d.regSock, "expected", "a running kubelet whose --root-dir is --kubelet-dir "+kubeletDir+", which finds the socket in "+filepath.Dir(d.regSock))
	}
}
