package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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

// driver is one resource type served as a DRA driver: its configs, what
// their plugins reported last, its claim records and its kubelet plugin
// helper. It implements kubeletplugin.DRAPlugin.
type driver struct {
	name   string // "<type>.<suffix>"
	typ    string
	node   string
	confs  []caller.Config
	caller caller.Caller
	client kubernetes.Interface
	state  *claimstate.File
	grace  time.Duration
	effect resourceapi.DeviceTaintEffect // of the taint of unusable devices
	every  time.Duration                 // how often DEVICES is asked
	// hostRoot is where the host's /dev and /sys are (CDI_HOST_ROOT), for
	// the device numbers of admin-access specs.
	hostRoot string
	log      *slog.Logger
	metrics  *metrics.Metrics
	recorder events.EventRecorder // nil: no events
	status   *statusWriter        // claims' status.devices (status.go); nil: not written
	metadata bool                 // prepared devices carry their metadata (KEP-5304)
	// leftovers are the device-plugin mode's ids of the type (migrate.go).
	leftovers leftovers
	// regSock and draSock are the helper's sockets: its registration
	// socket, which the kubelet's plugin watcher finds, and its DRA
	// service.
	regSock, draSock string

	helper *kubeletplugin.Helper // set by start
	// registration is the kubelet's last word on the driver's
	// registration (noteRegistration), nil before it came.
	registration *registerapi.RegistrationStatus
	fatal        func(error) // stops Run; set by start

	// poller asks the plugins for their devices and keeps their answers.
	poller *inventory.Poller

	mu        sync.Mutex
	offered   []resourceapi.Device // what the slice lists
	published bool                 // offered handed to the slice controller
	written   bool                 // the API server was seen with offered (Ready)
	sliceErr  error                // the slice controller's last failure, until Ready sees the slices written
	unnamed   map[string]bool      // keys already warned about
	preparing map[string]bool      // claim UIDs whose prepare runs (pin)
	missing   map[string]time.Time // claim UID → first scan that found it gone
	// known are the devices ever offered, by name, as last offered
	// untainted; unhealthy those of them now unusable or gone.
	known     map[string]resourceapi.Device
	unhealthy map[string]unhealthy
	refreshed time.Time     // when the devices were last asked
	changed   chan struct{} // closed and replaced when offered changes
}

func newDriver(typ string, confs []caller.Config, opt Options) (*driver, error) {
	name := typ + "." + opt.Suffix
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > resourceapi.DriverNameMaxLength {
		return nil, fmt.Errorf("resource type %q: the driver name %q is not a DNS subdomain of at most %d characters (%v)", typ, name, resourceapi.DriverNameMaxLength, errs)
	}
	st, err := claimstate.Open(opt.StateDir, name)
	if err != nil {
		return nil, err
	}
	var rec events.EventRecorder
	if opt.Events != nil {
		rec = opt.Events.NewRecorder(scheme.Scheme, name)
	}
	reg, dra := sockets(opt.KubeletDir, name, opt.PodUID)
	var status *statusWriter
	if opt.ClaimStatus && opt.Client != nil {
		status = newStatusWriter(opt.Client, name, opt.Log.With("driver", name))
	}
	return &driver{
		status: status,
		name:   name, typ: typ, node: opt.NodeName, confs: confs, caller: opt.Caller,
		client: opt.Client, state: st, grace: opt.StaleGrace, effect: opt.TaintEffect, every: opt.Poll,
		hostRoot: opt.HostRoot, log: opt.Log.With("driver", name), metrics: opt.Metrics, recorder: rec,
		metadata:  opt.DeviceMetadata,
		leftovers: leftovers{resource: opt.Suffix + "/" + typ, tracker: podgc.NewTracker(opt.StaleGrace)},
		regSock:   reg, draSock: dra,
		poller:  inventory.NewPoller(opt.Caller, confs, opt.Log.With("driver", name)),
		unnamed: map[string]bool{}, preparing: map[string]bool{}, missing: map[string]time.Time{},
		known: map[string]resourceapi.Device{}, unhealthy: map[string]unhealthy{}, changed: make(chan struct{}),
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
		kubeletplugin.NodeName(d.node),
		kubeletplugin.KubeClient(d.client),
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
	d.fatal = fatal
	h, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("driver %s: %w", d.name, err)
	}
	d.mu.Lock()
	d.helper = h
	d.mu.Unlock()
	return d.publish(ctx)
}

// oneCallPerClaim is the helper's gRPC interceptor: a
// NodePrepareResources or NodeUnprepareResources call holds the lock of
// each of its claims (claimstate.LockClaims) from the helper's GET of the
// claim to the metadata files it writes or removes after the driver's
// answer. The calls of one claim take turns, in this process and in the
// other pod of a rolling update (a kubelet that timed out and asks again,
// two pods of one shared claim), while those of different claims run at
// once. A call that cannot take its locks before its context ends fails
// whole, and the kubelet asks again.
func (d *driver) oneCallPerClaim(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	uids := claimUIDs(req)
	if len(uids) == 0 {
		return handler(ctx, req)
	}
	unlock, err := d.state.LockClaims(ctx, uids)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return handler(ctx, req)
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
// from the slice (device taints where DRADeviceTaints is off); any other
// stops the driver.
func (d *driver) HandleError(_ context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		d.log.Warn(msg, "err", err)
		return
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		// The slice controller failed to write the slices (it retries):
		// not ready until they are seen written.
		d.mu.Lock()
		d.sliceErr = err
		d.mu.Unlock()
		d.log.Warn(msg, "err", err)
		return
	}
	d.log.Error(msg, "err", err)
	d.fatal(fmt.Errorf("driver %s: %s: %w", d.name, msg, err))
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
