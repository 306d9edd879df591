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
func (lc *lifecycle) collectEvery(ctx context.Context, interval time.Duration) {
	inventory.Every(ctx, interval, nil, func() {
		sctx, cancel := context.WithTimeout(ctx, scanTimeout)
		defer cancel()
		lc.collect(sctx, time.Now())
	})
}

// collect runs one scan at now over the claims this driver recorded, and
// only those: their UIDs are the only request-ids the DRA mode makes. A
// claim whose ResourceClaim no longer exists, exists with another UID, or
// is no longer allocated any device of this driver on this node
// (deallocated but not deleted, or allocated elsewhere) is freed once it
// has been found so for the grace period. A claim the API server cannot
// be asked about counts for nothing.
func (lc *lifecycle) collect(ctx context.Context, now time.Time) {
	claims, err := lc.records.Read(ctx)
	if err != nil {
		lc.log.Error("stale claims: cannot read the claim records", "err", err)
		return
	}
	for _, uid := range slices.Sorted(maps.Keys(claims)) {
		c := claims[uid]
		why, err := lc.gone(ctx, c)
		if err != nil {
			lc.log.Warn("stale claims: cannot look the claim up; skipped", "claim", c.Namespace+"/"+c.Name, "uid", uid, "err", err)
			continue
		}
		lc.mu.Lock()
		if why == "" {
			delete(lc.missing, uid)
		} else if _, ok := lc.missing[uid]; !ok {
			lc.missing[uid] = now
		}
		since, due := lc.missing[uid], why != "" && now.Sub(lc.missing[uid]) >= lc.grace
		lc.mu.Unlock()
		if due {
			lc.free(ctx, c, why, now.Sub(since))
		}
	}
	lc.mu.Lock()
	maps.DeleteFunc(lc.missing, func(uid string, _ time.Time) bool { _, ok := claims[uid]; return !ok })
	lc.mu.Unlock()
}

// gone says why the claim's ResourceClaim is gone, or no longer this
// driver's on this node, or "" when it is there and allocated here.
func (lc *lifecycle) gone(ctx context.Context, c claimstate.Claim) (string, error) {
	rc, err := lc.client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
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
		if r.Driver == lc.name && r.Pool == lc.node {
			return "", nil
		}
	}
	return "the ResourceClaim is no longer allocated a device of " + lc.name + " on this node", nil
}

// free releases a stale claim and logs it.
func (lc *lifecycle) free(ctx context.Context, c claimstate.Claim, why string, absent time.Duration) {
	log := lc.log.With("claim", c.Namespace+"/"+c.Name, "uid", c.UID, "reason", why, "goneFor", absent.Round(time.Second))
	unlock, err := lc.records.LockClaims(ctx, []string{c.UID})
	if err != nil {
		log.Error("stale claim: freeing failed; trying again next scan", "err", err)
		return
	}
	defer unlock()
	held, err := lc.release(ctx, c.UID)
	if err != nil {
		log.Error("stale claim: freeing failed; trying again next scan", "err", err)
		return
	}
	lc.mu.Lock()
	delete(lc.missing, c.UID)
	lc.mu.Unlock()
	lc.metrics.StaleClaimFreed(lc.name)
	log.Info("stale claim freed", "devices", c.Keys, "held", held)
	lc.event(claimRef(c.Namespace, c.Name, types.UID(c.UID)), corev1.EventTypeNormal, ReasonStaleClaimFreed, "Free",
		fmt.Sprintf("%s, for %v: devices %v freed", why, absent.Round(time.Second), append(slices.Clone(c.Keys), c.AdminKeys...)))
}
