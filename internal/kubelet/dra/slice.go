package dra

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/devname"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// The attributes of a device, in the driver's domain.
const (
	attrKey resourceapi.QualifiedName = "key" // the exec protocol's device key
	// attrNUMA is the deprecated alias of the standard
	// resource.kubernetes.io/numaNode (KEP-6072), kept for one release so
	// that existing claims and classes go on matching (docs/kubernetes.md).
	attrNUMA       resourceapi.QualifiedName = "numaNode"
	attrPCIAddress resourceapi.QualifiedName = "pciAddress"
	attrVendorID   resourceapi.QualifiedName = "vendorId"
	attrPCIeSwitch resourceapi.QualifiedName = "pcieSwitch" // the switch's upstream port, "0000:17:00.0"
	attrDeviceID   resourceapi.QualifiedName = "deviceId"
	attrUUID       resourceapi.QualifiedName = "uuid" // an NVIDIA GPU's "GPU-...", as NVIDIA's DRA driver names it
	// attrNoIOMMU, true, marks a device of a no-IOMMU VFIO group (DEVICES
	// noiommu), published only on those: a class or claim keeps them out
	// with !("noiommu" in device.attributes["<driver>"]).
	attrNoIOMMU resourceapi.QualifiedName = "noiommu"
	// The generic plugin's (docs/plugins.md#generic): the sysfs class and
	// driver of a unit's nodes, and the USB device it hangs off.
	attrClass      resourceapi.QualifiedName = "class"
	attrDriver     resourceapi.QualifiedName = "driver"
	attrUSBVendor  resourceapi.QualifiedName = "usbVendor"
	attrUSBProduct resourceapi.QualifiedName = "usbProduct"
	attrUSBSerial  resourceapi.QualifiedName = "usbSerial"
)

// capShares is the capacity of a shared unit offered as one device
// (KEP-5075, consumable capacity): the share slots its plugin has for
// this driver's claims. A claim consumes one unless it asks for more.
const capShares resourceapi.QualifiedName = "shares"

// featureConsumableCapacity is the API server's feature gate that the
// slice controller names when it dropped a device's
// allowMultipleAllocations.
const featureConsumableCapacity = "DRAConsumableCapacity"

// claimed are the claims of a driver, for the publisher: a device held
// by one of them stays in the slice.
type claimed interface {
	// claimed returns the claims recorded and those being prepared.
	claimed(ctx context.Context) (claimstate.Claims, error)
}

// start hands the helper to the publisher and publishes the slice.
func (pb *publisher) start(ctx context.Context, h *kubeletplugin.Helper) error {
	pb.mu.Lock()
	pb.helper = h
	pb.mu.Unlock()
	return pb.publish(ctx)
}

// refresh asks every config's plugin for its devices (the poller's
// Refresh) and publishes the slice when what it offers changed. The
// claims are read after the plugins answered, so that a claim whose
// prepare ends in between is among them.
func (pb *publisher) refresh(ctx context.Context, claims claimed) {
	failed, ok := pb.poller.Refresh(ctx)
	for range failed {
		pb.metrics.PollFailed(pb.name)
	}
	if !ok {
		return
	}
	pb.podsOfNode(ctx)
	held, err := claims.claimed(ctx)
	if err != nil {
		pb.log.Error("cannot read the claim records; slice left as it is", "err", err)
		return
	}
	inv, answers := pb.poller.Inventory(), pb.poller.Answers()
	pb.mu.Lock()
	devs := pb.offer(inv, answers, held, time.Now())
	due := !pb.published || !equality.Semantic.DeepEqual(devs, pb.offered)
	pb.offered = devs
	pb.refreshed = time.Now()
	tainted := 0
	for _, dev := range devs {
		if len(dev.Taints) > 0 {
			tainted++
		}
	}
	pb.metrics.Published(pb.name, len(devs)-tainted, tainted)
	if due {
		close(pb.changed) // wakes the health streams
		pb.changed = make(chan struct{})
	}
	pb.mu.Unlock()
	if due {
		if err := pb.publish(ctx); err != nil {
			pb.log.Error("publishing the slice failed", "err", err)
		}
	}
}

// podsEvery bounds how often the publisher reads its node's allocatable
// pods: once a minute at most, on the poll's cadence.
const podsEvery = time.Minute

// podsOfNode makes a unit of unlimited shares (DEVICES unlimited) as many
// shares as the node's allocatable pods, status.allocatable["pods"], as
// no more pods than that run on it: the poller's SetUnlimitedShares.
// While the plugins report such a unit it reads the node, its own by name
// (a GET, never a list or watch), at most every podsEvery, and not at all
// otherwise. Until the node is read it stays inventory.DefaultMaxPods
// (the kubelet's default), and a failed read keeps the last value; the
// first failure is logged, and the recovery. A change shows in the slice
// that refresh then publishes.
func (pb *publisher) podsOfNode(ctx context.Context) {
	if !pb.poller.Unlimited() {
		return
	}
	pb.mu.Lock()
	due := pb.client != nil && (pb.podsRead.IsZero() || time.Since(pb.podsRead) >= pb.podsEvery)
	if due {
		pb.podsRead = time.Now()
	}
	pb.mu.Unlock()
	if !due {
		return
	}
	pods, err := allocatablePods(ctx, pb.client, pb.node)
	pb.mu.Lock()
	failing := pb.podsFailing
	pb.podsFailing = err != nil
	pb.mu.Unlock()
	switch {
	case err != nil && !failing:
		pb.log.Warn("cannot read the node's allocatable pods: units of unlimited shares keep their shares",
			"shares", pb.poller.UnlimitedShares(), "err", err)
		return
	case err != nil:
		return
	case failing:
		pb.log.Info("the node's allocatable pods can be read again", "pods", pods)
	}
	if pb.poller.SetUnlimitedShares(pods) {
		pb.log.Info("units of unlimited shares are offered as the node's allocatable pods", "shares", pods)
	}
}

// nodeReadTimeout bounds the read of the node's allocatable pods, which
// the poll that publishes the slices waits for.
const nodeReadTimeout = 10 * time.Second

// allocatablePods reads status.allocatable["pods"] of the node by name.
func allocatablePods(ctx context.Context, client kubernetes.Interface, node string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeReadTimeout)
	defer cancel()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	q, ok := n.Status.Allocatable[corev1.ResourcePods]
	if !ok {
		return 0, fmt.Errorf("node %s has no allocatable pods in its status", node)
	}
	pods, ok := q.AsInt64()
	if !ok || pods < 1 || pods > math.MaxInt32 {
		return 0, fmt.Errorf("node %s: allocatable pods %s is not a count from 1 to %d", node, q.String(), math.MaxInt32)
	}
	return int(pods), nil
}

// dropped hears that the API server dropped fields of a slice. When it
// dropped a device's allowMultipleAllocations, it does not serve
// consumable capacity (before 1.36, or DRAConsumableCapacity off): from
// then on each shared unit is offered as one device per share, and the
// poll is woken to publish that.
func (pb *publisher) dropped(err *resourceslice.DroppedFieldsError) {
	if !slices.Contains(err.DisabledFeatures(), featureConsumableCapacity) {
		return
	}
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if !pb.consumable {
		return
	}
	pb.consumable = false
	pb.log.Warn("the API server has no consumable capacity (" + featureConsumableCapacity + "): shared units are offered as one device per share")
	select {
	case pb.poke <- struct{}{}:
	default:
	}
}

// failed notes a failure of the slice controller to write the slices:
// the driver is not ready until they are seen written.
func (pb *publisher) failed(err error) {
	pb.mu.Lock()
	pb.sliceErr = err
	pb.mu.Unlock()
}

// devices returns how many devices the slice offers.
func (pb *publisher) devices() int {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return len(pb.offered)
}

// offer turns the inventory into slice devices. A device held by a
// request-id that is not one of this driver's claims is left out while it
// is held: a non-Kubernetes caller (or the device-plugin mode) has it.
// Devices of this driver's claims stay, as the scheduler counts them
// allocated. A device this driver has offered before that its plugin now
// calls unusable, or no longer reports at all, stays with a device taint
// (taint) instead of vanishing, until it is usable again. A shared unit
// is one device with consumable capacity (sharedDevice) while the API
// server is taken to serve it (consumable), else one device per share.
// Called with mu held.
func (pb *publisher) offer(inv inventory.Inventory, answers [][]protocol.DeviceInfo, claims claimstate.Claims, now time.Time) []resourceapi.Device {
	var out []resourceapi.Device
	listed := map[string]bool{} // names offered or held by another caller
	for _, dev := range inv.Devices {
		name, err := devname.Name(dev.Key)
		if err != nil {
			if !pb.unnamed[dev.Key] {
				pb.log.Warn("device not offered: its key has no device name", "key", dev.Key, "err", err)
				pb.unnamed[dev.Key] = true
			}
			continue
		}
		listed[name] = true
		if pb.consumable {
			if _, share := inv.Unit[dev.Key]; share {
				continue // one of its unit's share slots, which are the unit's capacity
			}
			if unit, ok := inv.Shared[dev.Key]; ok {
				if sd, ok := sharedDevice(name, dev, unit, claims); ok {
					pb.known[name] = sd
					out = append(out, sd)
				}
				continue
			}
		}
		if _, ours := claims[dev.HeldBy]; dev.HeldBy != "" && !ours {
			continue
		}
		sd := resourceapi.Device{Name: name, Attributes: attributes(dev)}
		if dev.PhysFn != "" {
			sd.ConsumesCounters, _ = consumesPF(dev.PhysFn)
		}
		pb.known[name] = sd
		out = append(out, sd)
	}
	for _, k := range inv.Skipped {
		if !pb.unnamed[k] {
			pb.log.Warn("device not offered: its key cannot be named in a pinned ADD", "key", k)
			pb.unnamed[k] = true
		}
	}
	unusable := unusable(answers, claims)
	for _, name := range slices.Sorted(maps.Keys(pb.known)) {
		if listed[name] {
			delete(pb.unhealthy, name)
			continue
		}
		key, _ := devname.Key(name)
		reason, reported := unusable[key]
		switch {
		case reported && reason == "":
			delete(pb.unhealthy, name)
			continue // held by another caller: not ill health
		case !reported:
			reason = "the plugin no longer reports the device"
		}
		u, ok := pb.unhealthy[name]
		if !ok {
			u.since = now
		}
		u.reason = reason
		pb.unhealthy[name] = u
		known := pb.known[name]
		sd := *known.DeepCopy()
		sd.Taints = []resourceapi.DeviceTaint{pb.taint(u)}
		out = append(out, sd)
	}
	return out
}

// sharedDevice is a shared unit as one device that many claims may be
// allocated at once (allowMultipleAllocations), its capacity capShares
// the unit's shares less those held by request-ids that are not this
// driver's claims (each such holder counts one). A claim consumes one
// share unless it asks for more, up to the capacity: without a
// requestPolicy the scheduler would give one claim the whole capacity.
// A unit whose every share is held outside Kubernetes is not offered.
func sharedDevice(name string, dev, unit protocol.DeviceInfo, claims claimstate.Claims) (resourceapi.Device, bool) {
	free := int64(unit.Shares)
	for _, h := range unit.Holders {
		if _, ours := claims[h]; !ours {
			free--
		}
	}
	if free < 1 {
		return resourceapi.Device{}, false
	}
	one := apiresource.NewQuantity(1, apiresource.DecimalSI)
	policy := &resourceapi.CapacityRequestPolicy{Default: one, ValidRange: &resourceapi.CapacityRequestPolicyRange{
		Min: one, Max: apiresource.NewQuantity(free, apiresource.DecimalSI)}}
	if free > 1 { // min + step must fit the capacity
		policy.ValidRange.Step = apiresource.NewQuantity(1, apiresource.DecimalSI)
	}
	multiple := true
	return resourceapi.Device{Name: name, Attributes: attributes(dev), AllowMultipleAllocations: &multiple,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			capShares: {Value: *apiresource.NewQuantity(free, apiresource.DecimalSI), RequestPolicy: policy},
		}}, true
}

// unhealthy is why a published device is unusable, and since when.
type unhealthy struct {
	reason string
	since  time.Time
}

// unusable returns, by key, the reason the plugins give for each device
// they report unusable, and "" for a device held by a request-id that is
// not one of this driver's claims; the first config's report counts.
// answers are the configs' last answers.
func unusable(answers [][]protocol.DeviceInfo, claims claimstate.Claims) map[string]string {
	out := map[string]string{}
	for _, devs := range answers {
		for _, dev := range devs {
			if _, done := out[dev.Key]; done {
				continue
			}
			_, ours := claims[dev.HeldBy]
			switch {
			case dev.HeldBy != "" && !ours:
				out[dev.Key] = ""
			case !dev.Usable:
				out[dev.Key] = dev.Reason
				if dev.Reason == "" {
					out[dev.Key] = "unusable"
				}
			}
		}
	}
	return out
}

// TaintSuffix ends the key of the taint an unusable device gets:
// <driver>/unusable, in the driver's domain.
const TaintSuffix = "unusable"

// taint is the device taint of an unusable device: the key in the
// driver's domain, the plugin's reason made a label value, the effect the
// driver was started with (NoSchedule unless --taint-effect says
// NoExecute), and the time it was first seen so.
func (pb *publisher) taint(u unhealthy) resourceapi.DeviceTaint {
	t := metav1.NewTime(u.since.Truncate(time.Second))
	return resourceapi.DeviceTaint{Key: pb.name + "/" + TaintSuffix, Value: TaintValue(u.reason), Effect: pb.effect, TimeAdded: &t}
}

// TaintValue makes a reason a taint value, which must be a label value:
// at most 63 characters of letters, digits, "-", "_" and ".", beginning
// and ending with a letter or digit. Every other run of characters
// becomes one "-": "no /dev node" becomes "no-dev-node".
func TaintValue(reason string) string {
	var b strings.Builder
	dash := false
	for _, r := range reason {
		ok := r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' || r == '.')
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	v := b.String()
	if len(v) > validation.LabelValueMaxLength {
		v = v[:validation.LabelValueMaxLength]
	}
	v = strings.TrimFunc(v, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if v == "" {
		return "unusable"
	}
	return v
}

// attributes describes a device to DeviceClass and claim selectors.
func attributes(dev protocol.DeviceInfo) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{attrKey: str(dev.Key)}
	if dev.NUMA >= 0 { // -1 is unknown: no attribute, never node 0
		n := int64(dev.NUMA)
		a[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: &n}
		a[attrNUMA] = resourceapi.DeviceAttribute{IntValue: &n}
	}
	if request.IsPCIAddr(dev.Key) {
		a[attrPCIAddress] = str(dev.Key)
		a[deviceattribute.StandardDeviceAttributePCIBusID] = str(dev.Key)
	} else if dev.PCIAddress != "" {
		a[attrPCIAddress] = str(dev.PCIAddress)
	}
	for name, v := range map[resourceapi.QualifiedName]string{attrClass: dev.Class, attrDriver: dev.Driver,
		attrUSBVendor: dev.USBVendor, attrUSBProduct: dev.USBProduct, attrUSBSerial: dev.USBSerial} {
		// A string attribute holds at most 64 bytes.
		if v != "" && len(v) <= resourceapi.DeviceAttributeMaxValueLength {
			a[name] = str(v)
		}
	}
	if dev.VendorID != "" {
		a[attrVendorID] = str(dev.VendorID)
	}
	if dev.DeviceID != "" {
		a[attrDeviceID] = str(dev.DeviceID)
	}
	if dev.UUID != "" {
		a[attrUUID] = str(dev.UUID)
	}
	if dev.PCIeRoot != "" { // the kernel's name, "pci0000:00", is the standard's form
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = str(dev.PCIeRoot)
	}
	if dev.PCIeSwitch != "" {
		a[attrPCIeSwitch] = str(dev.PCIeSwitch)
	}
	if dev.NoIOMMU {
		yes := true
		a[attrNoIOMMU] = resourceapi.DeviceAttribute{BoolValue: &yes}
	}
	return a
}

// publish hands the offered devices to the helper's slice controller,
// which writes them to the API server in the background: one pool named
// after the node (resourceSlices, below).
func (pb *publisher) publish(ctx context.Context) error {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if pb.helper == nil {
		return nil
	}
	p := resourceSlices(pb.offered)
	err := pb.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pb.node: p}})
	if err != nil {
		return err
	}
	pb.published = true
	pb.log.Info("slice published", "devices", len(pb.offered), "slices", len(p.Slices))
	return nil
}

// resourceSlices lays the devices of the node's resource pool out in slices: first the counter sets the devices
// consume, at most ResourceSliceMaxCounterSets a slice (a slice holds
// counter sets or devices, never both), then the devices, at most
// ResourceSliceMaxDevices a slice, or ResourceSliceMaxDevicesWithAdvancedFeatures
// when any has a taint or consumes counters. Without devices it is one
// empty slice, which says that the node has none.
func resourceSlices(devs []resourceapi.Device) resourceslice.Pool {
	var p resourceslice.Pool
	sets := counterSets(devs)
	for i := 0; i < len(sets); i += resourceapi.ResourceSliceMaxCounterSets {
		p.Slices = append(p.Slices, resourceslice.Slice{SharedCounters: sets[i:min(i+resourceapi.ResourceSliceMaxCounterSets, len(sets))]})
	}
	per := resourceapi.ResourceSliceMaxDevices
	for _, dev := range devs {
		if len(dev.Taints) > 0 || len(dev.ConsumesCounters) > 0 {
			per = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			break
		}
	}
	for i := 0; i < len(devs); i += per {
		p.Slices = append(p.Slices, resourceslice.Slice{Devices: devs[i:min(i+per, len(devs))]})
	}
	if len(devs) == 0 {
		p.Slices = append(p.Slices, resourceslice.Slice{})
	}
	return p
}

// counterVFs is the counter of a PF's counter set: how many VFs it can
// have. Each of its VFs consumes one.
const counterVFs = "vfs"

// consumesPF makes a VF of the PF pf (its key) consume one of the PF's VFs
// (KEP-4815, partitionable devices), so that the scheduler never
// allocates more VFs of a PF than it can have.
func consumesPF(pf string) ([]resourceapi.DeviceCounterConsumption, bool) {
	set, err := devname.Name(pf)
	if err != nil {
		return nil, false
	}
	return []resourceapi.DeviceCounterConsumption{{
		CounterSet: set, Counters: map[string]resourceapi.Counter{counterVFs: {Value: *apiresource.NewQuantity(1, apiresource.DecimalSI)}},
	}}, true
}

// counterSets are the counter sets the devices consume, in name order: a
// PF's holds as many VFs as the devices that consume it, which is what
// the plugin lists of the PF (the VFs its config gives it).
func counterSets(devs []resourceapi.Device) []resourceapi.CounterSet {
	count := map[string]int64{}
	for _, dev := range devs {
		for _, c := range dev.ConsumesCounters {
			q := c.Counters[counterVFs].Value
			count[c.CounterSet] += q.Value()
		}
	}
	var out []resourceapi.CounterSet
	for _, name := range slices.Sorted(maps.Keys(count)) {
		out = append(out, resourceapi.CounterSet{Name: name, Counters: map[string]resourceapi.Counter{
			counterVFs: {Value: *apiresource.NewQuantity(count[name], apiresource.DecimalSI)},
		}})
	}
	return out
}
