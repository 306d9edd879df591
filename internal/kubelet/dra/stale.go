package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
)

// scanTimeout bounds one stale-claim scan.
const scanTimeout = time.Minute

// collectEvery runs a stale-claim scan every interval until ctx ends.
func (d *driver) collectEvery(ctx context.Context, interval time.Duration) {
	inventory.Every(ctx, interval, nil, func() {
		sctx, cancel := context.WithTimeout(ctx, scanTimeout)
		defer cancel()
		d.collect(sctx, time.Now())
	})
}

// collect runs one scan at now over the claims this driver recorded, and
// only those: their UIDs are the only request-ids the DRA mode makes. A
// claim whose ResourceClaim no longer exists, exists with another UID, or
// is no longer allocated any device of this driver on this node
// (deallocated but not deleted, or allocated elsewhere) is freed once it
// has been found so for the grace period. A claim the API server cannot
// be asked about counts for nothing.
func (d *driver) collect(ctx context.Context, now time.Time) {
	claims, err := d.state.Read(ctx)
	if err != nil {
		d.log.Error("stale claims: cannot read the claim records", "err", err)
		return
	}
	for _, uid := range slices.Sorted(maps.Keys(claims)) {
		c := claims[uid]
		why, err := d.gone(ctx, c)
		if err != nil {
			d.log.Warn("stale claims: cannot look the claim up; skipped", "claim", c.Namespace+"/"+c.Name, "uid", uid, "err", err)
			continue
		}
		d.mu.Lock()
		if why == "" {
			delete(d.missing, uid)
		} else if _, ok := d.missing[uid]; !ok {
			d.missing[uid] = now
		}
		since, due := d.missing[uid], why != "" && now.Sub(d.missing[uid]) >= d.grace
		d.mu.Unlock()
		if due {
			d.free(ctx, c, why, now.Sub(since))
		}
	}
	d.mu.Lock()
	maps.DeleteFunc(d.missing, func(uid string, _ time.Time) bool { _, ok := claims[uid]; return !ok })
	d.mu.Unlock()
}

// gone says why the claim's ResourceClaim is gone, or no longer this
// driver's on this node, or "" when it is there and allocated here.
func (d *driver) gone(ctx context.Context, c claimstate.Claim) (string, error) {
	rc, err := d.client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "the ResourceClaim no longer exists", nil
	case err != nil:
		return "", err
	case string(rc.UID) != c.UID:
		return fmt.Sprintf("the ResourceClaim now has UID %s", rc.UID), nil
	case rc.Status.Allocation == nil:
		return "the ResourceClaim is no longer allocated", nil
	}
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Driver == d.name && r.Pool == d.node {
			return "", nil
		}
	}
	return "the ResourceClaim is no longer allocated a device of " + d.name + " on this node", nil
}

// free releases a stale claim and logs it.
func (d *driver) free(ctx context.Context, c claimstate.Claim, why string, absent time.Duration) {
	log := d.log.With("claim", c.Namespace+"/"+c.Name, "uid", c.UID, "reason", why, "goneFor", absent.Round(time.Second))
	unlock, err := d.state.LockClaims(ctx, []string{c.UID})
	if err != nil {
		log.Error("stale claim: freeing failed; trying again next scan", "err", err)
		return
	}
	defer unlock()
	held, err := d.release(ctx, c.UID)
	if err != nil {
		log.Error("stale claim: freeing failed; trying again next scan", "err", err)
		return
	}
	d.mu.Lock()
	delete(d.missing, c.UID)
	d.mu.Unlock()
	d.metrics.StaleClaimFreed(d.name)
	log.Info("stale claim freed", "devices", c.Keys, "held", held)
	d.event(claimRef(c.Namespace, c.Name, types.UID(c.UID)), corev1.EventTypeNormal, ReasonStaleClaimFreed, "Free",
		fmt.Sprintf("%s, for %v: devices %v freed", why, absent.Round(time.Second), append(slices.Clone(c.Keys), c.AdminKeys...)))
}
