package deviceplugin

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
)

// This file frees what a DRA mode left behind when a type moved from it
// to this mode without a drain (docs/kubernetes.md, "Moving a type
// between modes"): the claims its driver prepared, held under their UIDs
// and recorded in its claim records (the DRA mode's --state-dir). The
// kubelet unprepares a claim through the DRA driver's socket, which is
// gone, so nothing frees them once their pods end. This mode frees a
// claim when no container of the kubelet's PodResources list uses it (its
// DynamicResources) for two scans and the grace period, and drops its
// record.

// claimRecords returns the DRA driver's claim records of the type, named
// <type>.<prefix> as that mode names its drivers, or nil when the
// directory is not there: nothing to collect, and nothing is created.
func (b *Plugin) claimRecords(typ string) *claimstate.File {
	dir := b.opt.ClaimStateDir
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	f, err := claimstate.Open(dir, typ+"."+b.opt.Prefix)
	if err != nil {
		return nil
	}
	return f
}

// collectClaims frees the resource's type's DRA claims whose pods are gone.
func (r *resource) collectClaims(ctx context.Context, now time.Time, l podgc.Listing) {
	if r.claims == nil {
		return
	}
	claims, err := r.claims.Read(ctx)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("gc: cannot read the DRA mode's claim records", "path", r.claims.Path(), "err", err)
		}
		return
	}
	var held []string
	live := map[string]bool{}
	for uid, c := range claims {
		if len(c.Keys) == 0 {
			continue // admin access: holds nothing
		}
		held = append(held, uid)
		if l.Claims[c.Namespace+"/"+c.Name] {
			live[uid] = true
		}
	}
	for _, v := range r.claimGC.Scan(now, held, live) {
		r.freeClaim(ctx, v, claims[v.ID])
	}
}

// freeClaim sends DEL for the claim's UID to every config of the type,
// then drops its record.
func (r *resource) freeClaim(ctx context.Context, v podgc.Verdict, c claimstate.Claim) {
	r.handout.Lock()
	defer r.handout.Unlock()
	var errs []error
	for _, conf := range r.confs {
		_, err := r.caller.Del(ctx, conf, v.ID)
		errs = append(errs, err)
	}
	r.pollNow()
	if err := errors.Join(errs...); err != nil {
		r.log.Error("gc: freeing a DRA claim failed; trying again next scan", "claim", c.Namespace+"/"+c.Name, "uid", v.ID, "err", err)
		return
	}
	err := r.claims.Update(ctx, func(cs claimstate.Claims) error {
		delete(cs, v.ID)
		return nil
	})
	if err != nil {
		r.log.Error("gc: dropping a freed DRA claim's record failed", "claim", c.Namespace+"/"+c.Name, "uid", v.ID, "err", err)
	}
	r.claimGC.Forget(v.ID)
	r.metrics.GCFreed(r.name)
	r.log.Info("gc: freed a claim the DRA mode prepared: no pod uses it", "claim", c.Namespace+"/"+c.Name, "uid", v.ID, "keys", c.Keys, "scans", v.Scans, "absentFor", v.Absent.Round(time.Second))
}
