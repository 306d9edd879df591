package dra

import (
	"context"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
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
	// aheadKeep is how long a claim prepared ahead waits for the kubelet's
	// prepare to be freed at once when its allocation goes. Past it, the
	// claim is an ordinary recorded one, the stale-claim collector's: the
	// kubelet asks within a second of binding the pod, and a claim held
	// longer may be one the kubelet prepared through the other pod of a
	// rolling update.
	aheadKeep = time.Minute
	// aheadRetries is how often freeing a claim prepared ahead is tried
	// again after a failure, aheadRetryDelay doubling up to aheadTimeout
	// apart; then it is the stale-claim collector's.
	aheadRetries    = 5
	aheadRetryDelay = 100 * time.Millisecond
)

// aheadClaim is a claim prepared ahead that the kubelet has not asked for
// yet: what its prepare answers.
type aheadClaim struct {
	key             string // namespace/name
	keys, adminKeys []string
	cdi             map[string][]string // each key's CDI device ids
	since           time.Time           // when it was prepared
}

// holds says whether the claim was prepared ahead for these devices.
func (a aheadClaim) holds(keys, adminKeys []string) bool {
	return slices.Equal(a.keys, keys) && slices.Equal(a.adminKeys, adminKeys)
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
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](aheadRetryDelay, aheadTimeout))
	d.mu.Lock()
	d.claims = inf.GetIndexer()
	d.mu.Unlock()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.claimChanged(queue, obj) },
		UpdateFunc: func(_, obj any) { d.claimChanged(queue, obj) },
		DeleteFunc: func(obj any) { d.claimDeleted(queue, obj) },
	})
	if err != nil {
		d.mu.Lock()
		d.claims = nil
		d.mu.Unlock()
		d.log.Error("cannot watch ResourceClaims: claims are prepared when the kubelet asks", "err", err)
		return
	}
	done := make(chan struct{})
	for range aheadWorkers {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				if ctx.Err() == nil { // stopping: what is queued is left
					if d.syncAhead(ctx, inf.GetIndexer(), key) && queue.NumRequeues(key) < aheadRetries {
						queue.AddRateLimited(key) // a claim to free, not freed
					} else {
						queue.Forget(key)
					}
				}
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
// as the informer has it: claims prepared ahead under its name that it no
// longer matches are freed, then a wanted claim is prepared, then the
// claim is read again and compared once more: a change that came while
// the prepare ran found nothing held ahead yet (claimChanged), and is seen
// only here.
func (d *driver) syncAhead(ctx context.Context, claims cache.Indexer, key string) (retry bool) {
	ctx, cancel := context.WithTimeout(ctx, aheadTimeout)
	defer cancel()
	current := func() *resourceapi.ResourceClaim {
		if obj, ok, _ := claims.GetByKey(key); ok {
			c, _ := obj.(*resourceapi.ResourceClaim)
			return c
		}
		return nil
	}
	claim := current()
	retry = !d.dropUnmatched(ctx, key, claim)
	if claim != nil && d.wantAhead(claim) {
		d.prepareAhead(ctx, claim)
		retry = !d.dropUnmatched(ctx, key, current()) || retry
	}
	return retry
}

// dropUnmatched frees the claims prepared ahead under key that claim (nil:
// gone) no longer matches: it is gone, has another UID, or is allocated
// other devices of this driver on this node, or none (deallocated, or
// allocated elsewhere). A claim being deleted, or no longer reserved,
// still matches: its pod may run yet, and the kubelet unprepares it.
// Claims prepared ahead longer than aheadKeep ago are forgotten instead,
// and left to the stale-claim collector. It reports whether every claim
// to free was freed.
func (d *driver) dropUnmatched(ctx context.Context, key string, claim *resourceapi.ResourceClaim) bool {
	var keys, adminKeys []string
	if claim != nil {
		if results, err := d.allocated(claim); err == nil {
			keys, adminKeys = splitKeys(results)
		}
	}
	d.mu.Lock()
	var drop []string
	for uid, a := range d.ahead {
		if a.key != key {
			continue
		}
		switch {
		case time.Since(a.since) > aheadKeep:
			delete(d.ahead, uid)
		case claim == nil || uid != string(claim.UID) || len(keys)+len(adminKeys) == 0 || !a.holds(keys, adminKeys):
			drop = append(drop, uid)
		}
	}
	d.mu.Unlock()
	ok := true
	for _, uid := range drop {
		ok = d.dropAhead(ctx, key, uid) && ok
	}
	return ok
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
	results, err := d.allocated(claim)
	if err != nil || len(results) == 0 {
		return // the kubelet's prepare says why, or has nothing to do
	}
	keys, adminKeys := splitKeys(results)
	if rec, ok := records[uid]; ok {
		if sameDevices(rec, keys, adminKeys) == nil {
			return // prepared, or being prepared, already
		}
		// Recorded for other devices: the claim was deallocated since (so
		// its pods are gone) and allocated anew here, and what the record
		// holds was prepared ahead (by the other pod of a rolling update,
		// or before a restart) for an allocation no longer there.
		if _, err := d.release(ctx, uid); err != nil {
			log.Warn("prepare ahead: the claim was allocated anew; freeing its old devices failed", "old", rec.Keys, "err", err)
			return
		}
		log.Info("prepare ahead: the claim was allocated anew; its old devices freed", "old", rec.Keys, "devices", keys)
	}
	// Recorded before the ADD: the kubelet has not checkpointed this
	// claim, so if the ADD is cut short (a stop, a crash) and its pod goes
	// before the kubelet asks, only the record tells the stale-claim
	// collector that the plugins may hold devices under its UID.
	err = d.state.Update(ctx, func(cs claimstate.Claims) error {
		if _, ok := cs[uid]; !ok {
			cs[uid] = claimstate.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Keys: keys, AdminKeys: adminKeys, Since: time.Now().UTC()}
		}
		return nil
	})
	var cdi map[string][]string
	if err == nil {
		cdi, err = d.pin(ctx, claim, results)
	}
	if err != nil {
		d.metrics.PreparedAhead(d.name, metrics.AheadFailed)
		log.Warn("prepare ahead failed: the kubelet's prepare tries again", "devices", keys, "adminDevices", adminKeys, "err", err)
		return
	}
	d.mu.Lock()
	d.ahead[uid] = aheadClaim{key: claim.Namespace + "/" + claim.Name, keys: keys, adminKeys: adminKeys, cdi: cdi, since: time.Now()}
	d.mu.Unlock()
	d.metrics.PreparedAhead(d.name, metrics.AheadPrepared)
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
// and no longer will: its allocation went, or the claim did. It reports
// whether the claim is freed (or was taken by the kubelet meanwhile).
func (d *driver) dropAhead(ctx context.Context, key, uid string) bool {
	log := d.log.With("claim", key, "uid", uid)
	unlock, err := d.state.LockClaims(ctx, []string{uid})
	if err != nil {
		log.Error("a claim prepared ahead is no longer allocated here: cannot lock it to free it; trying again", "err", err)
		return false
	}
	defer unlock()
	d.mu.Lock()
	a, ok := d.ahead[uid]
	d.mu.Unlock()
	if !ok {
		return true // the kubelet asked for it meanwhile
	}
	held, err := d.release(ctx, uid)
	if err != nil {
		log.Error("a claim prepared ahead is no longer allocated here: freeing it failed; trying again", "err", err)
		return false
	}
	d.metrics.PreparedAhead(d.name, metrics.AheadFreed)
	log.Info("prepared ahead, freed unasked: the claim is no longer allocated these devices here", "devices", a.keys, "held", held)
	return true
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
	if !ok || !a.holds(keys, adminKeys) {
		return nil, false
	}
	records, err := d.state.Read(ctx)
	if rec := records[uid]; err != nil || !rec.Prepared || sameDevices(rec, keys, adminKeys) != nil {
		return nil, false // freed meanwhile (the other pod of a rolling update): prepared anew
	}
	d.metrics.PreparedAhead(d.name, metrics.AheadUsed)
	return a.cdi, true
}

// unpreparedByKubelet notes that the kubelet unprepared a claim: it is
// not prepared ahead again while the claim exists (its allocation stays
// until the claim's pods are gone). Only a claim the informer holds is
// noted, so that its deletion forgets it.
func (d *driver) unpreparedByKubelet(namespace, name, uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ahead, uid)
	if d.claims == nil {
		return
	}
	if obj, ok, _ := d.claims.GetByKey(namespace + "/" + name); ok {
		if c, _ := obj.(*resourceapi.ResourceClaim); c != nil && string(c.UID) == uid {
			d.unprepared[uid] = true
		}
	}
}
