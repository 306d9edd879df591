package dra

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metaapply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/cdi-exec/plugins/internal/atomicfile"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// This file writes a claim's status.devices (KEP-4817): after a prepare,
// one entry per device of ours with a Ready condition and the device's
// facts in data (and networkData for a network function); after an
// unprepare, none. The writes are server-side applies under the driver's
// name as field manager, so that they touch only this driver's entries
// and no other driver's, and carry the claim's UID, so that they never
// reach a claim of the same name made anew. They run in the background:
// the status is for people and tools reading the claim, and no prepare
// waits for the API server.

// ConditionReady is the condition a prepared device has in the claim's
// status.
const ConditionReady = "Ready"

// DeviceData is what status.devices[].data holds for a device of ours:
// the exec protocol's facts of it.
type DeviceData struct {
	Key        string   `json:"key"`
	Nodes      []string `json:"nodes,omitempty"`
	PCIAddress string   `json:"pciAddress,omitempty"`
	UUID       string   `json:"uuid,omitempty"`
	NUMANode   *int     `json:"numaNode,omitempty"`
}

// claimStatus is the status.devices a claim should have from this driver:
// none once it is unprepared.
type claimStatus struct {
	namespace, name string
	uid             types.UID
	devices         []*resourceapply.AllocatedDeviceStatusApplyConfiguration
	tries           int
}

// statusWriter applies claim statuses in the background, the newest per
// claim, and retries a failed write a few times.
type statusWriter struct {
	client kubernetes.Interface
	driver string
	log    *slog.Logger

	mu      sync.Mutex
	pending map[types.UID]claimStatus
	order   []types.UID
	wake    chan struct{}
}

const (
	statusTries   = 5
	statusTimeout = 10 * time.Second
	statusBackoff = 500 * time.Millisecond
)

func newStatusWriter(client kubernetes.Interface, driver string, log *slog.Logger) *statusWriter {
	return &statusWriter{client: client, driver: driver, log: log, pending: map[types.UID]claimStatus{}, wake: make(chan struct{}, 1)}
}

// set queues the status of a claim, replacing one not yet written.
func (w *statusWriter) set(s claimStatus) {
	if w == nil || w.client == nil {
		return
	}
	w.mu.Lock()
	if _, queued := w.pending[s.uid]; !queued {
		w.order = append(w.order, s.uid)
	}
	w.pending[s.uid] = s
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued status.
func (w *statusWriter) next() (claimStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.order) == 0 {
		return claimStatus{}, false
	}
	uid := w.order[0]
	w.order = w.order[1:]
	s := w.pending[uid]
	delete(w.pending, uid)
	return s, true
}

// retry queues s again, unless a newer status of its claim came meanwhile.
func (w *statusWriter) retry(s claimStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, newer := w.pending[s.uid]; newer {
		return
	}
	w.pending[s.uid] = s
	w.order = append(w.order, s.uid)
}

// run writes queued statuses until ctx ends.
func (w *statusWriter) run(ctx context.Context) {
	if w == nil || w.client == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		failed := false
		for {
			s, ok := w.next()
			if !ok {
				break
			}
			if err := w.apply(ctx, s); err != nil {
				s.tries++
				if s.tries < statusTries && ctx.Err() == nil {
					w.retry(s)
					failed = true
				} else {
					w.log.Warn("writing the claim's device status failed", "claim", s.namespace+"/"+s.name, "uid", s.uid, "err", err)
				}
			}
		}
		if failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(statusBackoff):
			}
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// apply writes one claim's status.devices of this driver. A claim that is
// gone, or was made anew under its name (another UID), needs none.
func (w *statusWriter) apply(ctx context.Context, s claimStatus) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st := resourceapply.ResourceClaimStatus()
	if len(s.devices) > 0 {
		st = st.WithDevices(s.devices...)
	}
	ac := resourceapply.ResourceClaim(s.name, s.namespace).WithUID(s.uid).WithStatus(st)
	_, err := w.client.ResourceV1().ResourceClaims(s.namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: w.driver, Force: true})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another claim under its name (a UID precondition)
	}
	if err == nil {
		w.log.Debug("claim device status written", "claim", s.namespace+"/"+s.name, "devices", len(s.devices))
	}
	return err
}

// deviceStatus is the status entry of one prepared device: Ready, with
// the device's facts from the last inventory (info, when known) and, for
// a PCI function with a network interface, its networkData.
func deviceStatus(driver string, r result, info protocol.DeviceInfo, known bool, hostRoot string, now time.Time) *resourceapply.AllocatedDeviceStatusApplyConfiguration {
	data := DeviceData{Key: r.key}
	if known {
		data.Nodes = info.Nodes
		data.UUID = info.UUID
		if info.NUMA >= 0 {
			n := info.NUMA
			data.NUMANode = &n
		}
	}
	if request.IsPCIAddr(r.key) {
		data.PCIAddress = r.key
	}
	raw, _ := json.Marshal(data) // plain strings and ints: cannot fail
	msg := "prepared by " + driver
	if r.admin {
		msg = "prepared with admin access by " + driver
	}
	st := resourceapply.AllocatedDeviceStatus().
		WithDriver(driver).WithPool(r.Pool).WithDevice(r.Device).
		WithConditions(metaapply.Condition().
			WithType(ConditionReady).WithStatus(metav1.ConditionTrue).
			WithReason("Prepared").WithMessage(msg).
			WithLastTransitionTime(metav1.NewTime(now))).
		WithData(runtime.RawExtension{Raw: raw})
	if r.ShareID != nil {
		st = st.WithShareID(string(*r.ShareID))
	}
	if data.PCIAddress != "" {
		if iface, mac, ok := netInterface(hostRoot, data.PCIAddress); ok {
			nd := resourceapply.NetworkDeviceData().WithInterfaceName(iface)
			if mac != "" {
				nd = nd.WithHardwareAddress(mac)
			}
			st = st.WithNetworkData(nd)
		}
	}
	return st
}

// netInterface returns the network interface of the PCI function addr
// (the first under its net/ directory) and its MAC address, from sysfs
// under hostRoot.
func netInterface(hostRoot, addr string) (iface, mac string, ok bool) {
	dir := filepath.Join(hostRoot, "sys/bus/pci/devices", addr, "net")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return "", "", false
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	iface = names[0]
	if b, err := os.ReadFile(filepath.Join(dir, iface, "address")); err == nil {
		mac = strings.TrimSpace(string(b))
	}
	return iface, mac, true
}

// deviceInfos returns what the last inventory says of the results'
// devices, by key.
func (lc *lifecycle) deviceInfos(results []result) map[string]protocol.DeviceInfo {
	out := make(map[string]protocol.DeviceInfo, len(results))
	for _, r := range results {
		if _, info, ok := lc.poller.Reported(r.key); ok {
			out[r.key] = info
		}
	}
	return out
}

// deviceStatuses are the status entries of a prepared claim's devices of
// this driver.
func (lc *lifecycle) deviceStatuses(results []result, infos map[string]protocol.DeviceInfo) []*resourceapply.AllocatedDeviceStatusApplyConfiguration {
	now := time.Now()
	out := make([]*resourceapply.AllocatedDeviceStatusApplyConfiguration, 0, len(results))
	for _, r := range results {
		info, known := infos[r.key]
		out = append(out, deviceStatus(lc.name, r, info, known, lc.hostRoot, now))
	}
	return out
}

// writeMetadataFile is how the helper writes the metadata files and
// their CDI specs (kubeletplugin.MetadataFileOps): each replaced
// atomically (renamed over the old one), without the helper's own two
// fsyncs a file. They are
// derived from the claim at each prepare, and the spec that mounts a
// file lives in --cdi-spec-dir, /var/run/cdi, a tmpfs that a reboot
// empties: a file needs no more durability than the spec that points at
// it. The fsyncs were about 4 of the 20 ms the kubelet waited for a
// prepare (docs/performance.md#the-daemons-calls-and-requests).
func writeMetadataFile(name string, data []byte, perm os.FileMode) error {
	base := filepath.Base(name)
	return atomicfile.WriteBytes(filepath.Dir(name), base, atomicfile.Options{Temp: "." + base + ".tmp-*", Perm: perm, NoSync: true}, data)
}

// deviceMetadata is what the container learns of a prepared device
// (KEP-5304): the attributes its slice publishes, and a network
// function's interface.
func (lc *lifecycle) deviceMetadata(r result, infos map[string]protocol.DeviceInfo) *kubeletplugin.DeviceMetadata {
	info, known := infos[r.key]
	if !known {
		info = protocol.DeviceInfo{Key: r.key, NUMA: -1}
	}
	md := &kubeletplugin.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{}}
	for name, a := range attributes(info) {
		md.Attributes[string(name)] = a
	}
	if request.IsPCIAddr(r.key) {
		if iface, mac, ok := netInterface(lc.hostRoot, r.key); ok {
			md.NetworkData = &resourceapi.NetworkDeviceData{InterfaceName: iface, HardwareAddress: mac}
		}
	}
	return md
}
