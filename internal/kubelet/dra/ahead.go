package dra

import (
	"context"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// A claim is prepared ahead: when the scheduler has allocated it devices
// of this driver on this node and reserved it for a pod, before the
// kubelet asks. The kubelet's prepare, hundreds of milliseconds later,
// then finds the ADD done and answers at once; the ADD and its fsyncs are
// off the pod's start path. The scheduler counts the devices allocated
// from the moment it writes the allocation, so holding them early takes
// nothing from another claim. docs/kubernetes.md#preparing-ahead.

const (
	// aheadWorkers is how many claims a driver prepares ahead at once.
	aheadWorkers = 4
	// aheadTimeout bounds one prepare ahead or its undoing.
	aheadTimeout = time.Minute
)

// aheadClaim is a claim prepared ahead that the kubelet has not asked for
// yet: what its prepare answers.
type aheadClaim struct {
	key             string // namespace/name
	keys, adminKeys []string
	cdi             map[string][]string // each key's CDI device ids
}

// claimInformer watches every ResourceClaim of the cluster, without
// their managed fields, for the drivers' prepares ahead: the API server
// has no field selector for a claim's node.
func claimInformer(client kubernetes.Interface) cache.SharedIndexInformer {
	inf := resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, 0, cache.Indexers{})
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	return inf
}

// watchClaims has the driver prepare ahead the claims the informer shows
// allocated to it, and free those it prepared ahead whose allocation went
// before the kubelet asked, until ctx ends.
func (d *driver) watchClaims(ctx context.Context, inf cache.SharedIndexInformer) {
	queue := workqueue.NewTyped[string]()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.claimChanged(queue, obj) },
		UpdateFunc: func(_, obj any) { d.claimChanged(queue, obj) },
		DeleteFunc: func(obj any) { d.claimDeleted(queue, obj) },
	})
	if err != nil {
		d.log.Error("cannot watch ResourceClaims: claims are prepared when the kubelet asks", "err", err)
		return
	}
	d.mu.Lock()
	d.aheadOn = true
	d.mu.Unlock()
	done := make(chan struct{})
	for range aheadWorkers {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				d.syncAhead(ctx, inf.GetIndexer(), key)
				queue.Done(key)
			}
		}()
	}
	<-ctx.Done()
	_ = inf.RemoveEventHandler(reg)
	queue.ShutDown()
	for range aheadWorkers {
		<-done
	}
}

// claimChanged queues a claim allocated to this driver on this node, and
// one it prepared ahead, whatever the change.
func (d *driver) claimChanged(queue workqueue.TypedInterface[string], obj any) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	key := c.Namespace + "/" + c.Name
	if d.wantAhead(c) || d.heldAhead(key) {
		queue.Add(key)
	}
}

// claimDeleted forgets that the kubelet unprepared a deleted claim, and
// queues one prepared ahead, to be freed.
func (d *driver) claimDeleted(queue workqueue.TypedInterface[string], obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	d.mu.Lock()
	delete(d.unprepared, string(c.UID))
	d.mu.Unlock()
	if key := c.Namespace + "/" + c.Name; d.heldAhead(key) {
		queue.Add(key)
	}
}

// wantAhead says whether a claim is one to prepare ahead: allocated
// devices of this driver on this node, reserved for a pod, not being
// deleted.
func (d *driver) wantAhead(c *resourceapi.ResourceClaim) bool {
	if c.DeletionTimestamp != nil || c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
		return false
	}
	return slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == d.name && r.Pool == d.node
	})
}

// heldAhead says whether a claim of that namespace/name is prepared
// ahead and not yet asked for by the kubelet.
func (d *driver) heldAhead(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.ahead {
		if a.key == key {
			return true
		}
	}
	return false
}

// syncAhead brings one claim's preparation ahead in line with the claim
// as the informer has it: a wanted claim is prepared, then claims
// prepared ahead under that name that are no longer wanted (deleted,
// deallocated, replaced by a claim with another UID) are freed. The
// claim is read again for the second step: a change that came while the
// prepare ran found nothing held ahead yet (claimChanged), and is seen
// only here.
func (d *driver) syncAhead(ctx context.Context, claims cache.Indexer, key string) {
	ctx, cancel := context.WithTimeout(ctx, aheadTimeout)
	defer cancel()
	current := func() *resourceapi.ResourceClaim {
		if obj, ok, _ := claims.GetByKey(key); ok {
			if c, ok := obj.(*resourceapi.ResourceClaim); ok && d.wantAhead(c) {
				return c
			}
		}
		return nil
	}
	if claim := current(); claim != nil {
		d.prepareAhead(ctx, claim)
	}
	claim := current()
	d.mu.Lock()
	var drop []string
	for uid, a := range d.ahead {
		if a.key == key && (claim == nil || uid != string(claim.UID)) {
			drop = append(drop, uid)
		}
	}
	d.mu.Unlock()
	for _, uid := range drop {
		d.dropAhead(ctx, key, uid)
	}
}

// prepareAhead prepares a claim under its lock, as the kubelet's prepare
// would, unless the claim is prepared already (here, by the kubelet, or
// by the other pod of a rolling update) or the kubelet has unprepared it.
// A failure is logged only: the kubelet's prepare tries again, and reports
// what fails then.
func (d *driver) prepareAhead(ctx context.Context, claim *resourceapi.ResourceClaim) {
	start := time.Now()
	uid := string(claim.UID)
	log := d.log.With("claim", claim.Namespace+"/"+claim.Name, "uid", uid)
	if checkUID(uid) != nil {
		return // the kubelet's prepare refuses it, and says why
	}
	if d.skipAhead(uid) { // most changes of a claim are of one prepared ahead: no lock for them
		return
	}
	unlock, err := d.state.LockClaims(ctx, []string{uid})
	if err != nil {
		log.Warn("prepare ahead: cannot lock the claim; the kubelet's prepare will", "err", err)
		return
	}
	defer unlock()
	if d.skipAhead(uid) {
		return
	}
	records, err := d.state.Read(ctx)
	if err != nil {
		log.Warn("prepare ahead: cannot read the claim records; the kubelet's prepare will", "err", err)
		return
	}
	if records[uid].Prepared {
		return
	}
	results, err := d.allocated(claim)
	if err != nil || len(results) == 0 {
		return // the kubelet's prepare says why, or has nothing to do
	}
	keys, adminKeys := splitKeys(results)
	cdi, err := d.pin(ctx, claim, results)
	if err != nil {
		log.Warn("prepare ahead failed: the kubelet's prepare tries again", "devices", keys, "adminDevices", adminKeys, "err", err)
		return
	}
	d.mu.Lock()
	d.ahead[uid] = aheadClaim{key: claim.Namespace + "/" + claim.Name, keys: keys, adminKeys: adminKeys, cdi: cdi}
	d.mu.Unlock()
	log.Info("prepared ahead", "devices", keys, "adminDevices", adminKeys, "took", time.Since(start).Round(time.Millisecond))
	if d.status != nil { // now, not in the kubelet's prepare: fewer writes while pods start
		d.status.set(claimStatus{namespace: claim.Namespace, name: claim.Name, uid: claim.UID, devices: d.deviceStatuses(results, d.deviceInfos(results))})
	}
}

// skipAhead says whether a claim is not to be prepared ahead: it is
// already, or the kubelet has unprepared it.
func (d *driver) skipAhead(uid string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, held := d.ahead[uid]
	return held || d.unprepared[uid]
}

// dropAhead frees a claim prepared ahead that the kubelet never asked for
// and no longer will: its allocation went, or the claim did.
func (d *driver) dropAhead(ctx context.Context, key, uid string) {
	log := d.log.With("claim", key, "uid", uid)
	unlock, err := d.state.LockClaims(ctx, []string{uid})
	if err != nil {
		log.Error("a claim prepared ahead is no longer allocated here: cannot lock it to free it; the stale-claim collector will", "err", err)
		return
	}
	defer unlock()
	d.mu.Lock()
	a, ok := d.ahead[uid]
	d.mu.Unlock()
	if !ok {
		return // the kubelet asked for it meanwhile
	}
	held, err := d.release(ctx, uid)
	if err != nil {
		log.Error("a claim prepared ahead is no longer allocated here: freeing it failed; the stale-claim collector tries again", "err", err)
		return
	}
	log.Info("prepared ahead, freed unasked: the claim is no longer allocated here", "devices", a.keys, "held", held)
	if d.status != nil {
		ns, name, _ := strings.Cut(key, "/")
		d.status.set(claimStatus{namespace: ns, name: name, uid: types.UID(uid)})
	}
}

// takeAhead hands the kubelet's prepare what the claim's prepare ahead
// answered, when it prepared the claim for the same devices and the
// claim is still recorded so: ok is false when there is none. The claim
// is the kubelet's from then on.
func (d *driver) takeAhead(ctx context.Context, uid string, keys, adminKeys []string) (cdi map[string][]string, ok bool) {
	d.mu.Lock()
	delete(d.unprepared, uid)
	a, ok := d.ahead[uid]
	delete(d.ahead, uid)
	d.mu.Unlock()
	if !ok || !slices.Equal(a.keys, keys) || !slices.Equal(a.adminKeys, adminKeys) {
		return nil, false
	}
	records, err := d.state.Read(ctx)
	if rec := records[uid]; err != nil || !rec.Prepared || sameDevices(rec, keys, adminKeys) != nil {
		return nil, false // freed meanwhile (the other pod of a rolling update): prepared anew
	}
	return a.cdi, true
}

// unpreparedByKubelet notes that the kubelet unprepared a claim: it is
// not prepared ahead again while the claim exists (its allocation stays
// until the claim's pods are gone).
func (d *driver) unpreparedByKubelet(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ahead, uid)
	if d.aheadOn {
		d.unprepared[uid] = true
	}
}
