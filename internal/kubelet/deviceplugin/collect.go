package deviceplugin

import (
	"context"
	"errors"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
)

// collect runs one garbage-collection scan at now: it lists the kubelet's
// pods, and lets every resource free the ids due. When the kubelet cannot
// be asked, the scan is skipped and counts for nothing.
func (b *Plugin) collect(ctx context.Context, now time.Time) error {
	l, err := podgc.List(ctx, b.podResources())
	if err != nil {
		b.log.Warn("gc: cannot list pod resources; scan skipped", "err", err)
		return err
	}
	for _, r := range b.res {
		live := map[string]bool{}
		for _, c := range l.Containers {
			if c.Resource == r.name {
				live[podgc.RequestID(r.name, r.typ, c.DeviceIDs)] = true
			}
		}
		r.collect(ctx, now, live)
		if l.Pods > 0 { // a kubelet that lists no pod may have just started
			r.collectClaims(ctx, now, l)
		}
	}
	return nil
}

// collect frees the ids of this resource that are due.
func (r *resource) collect(ctx context.Context, now time.Time, live map[string]bool) {
	for _, v := range r.gc.Scan(now, podgc.Held(r.poller.Inventory().Holders, r.typ), live) {
		r.free(ctx, v)
	}
}

// free sends DEL for id to every config of the type. It gives up, for this
// scan, when the kubelet has handed the id out again since it was judged.
func (r *resource) free(ctx context.Context, v podgc.Verdict) {
	r.handout.Lock()
	defer r.handout.Unlock()
	if !r.gc.Due(v.ID) {
		return
	}
	var errs []error
	held := false
	for _, conf := range r.confs {
		h, err := r.caller.Del(ctx, conf, v.ID)
		held = held || h
		errs = append(errs, err)
	}
	r.pollNow()
	if err := errors.Join(errs...); err != nil {
		r.log.Error("gc: freeing failed; trying again next scan", "requestId", v.ID, "err", err)
		return
	}
	r.gc.Forget(v.ID)
	reason := "absent from PodResources"
	if held {
		r.metrics.GCFreed(r.name)
	} else {
		reason += "; it held nothing any more"
	}
	r.log.Info("gc: freed", "requestId", v.ID, "reason", reason, "scans", v.Scans, "absentFor", v.Absent.Round(time.Second))
}
