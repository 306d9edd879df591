package dra

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
)

// This file frees what a device-plugin mode left behind when a type moved
// to the DRA mode without a drain (docs/kubernetes.md, "Moving a type
// between modes"). Pods that got devices through the device plugin keep
// them under the device-plugin mode's request-ids (k8s-dp-<type>-…); only
// that mode's collector frees them, and once the type is served by DRA
// (the mode lock: no device-plugin process serves it any more) that
// collector no longer runs. So the DRA driver runs the same collector for
// those ids: when the kubelet's PodResources list has no container with
// an id's device set for two scans and the grace period, the id is freed
// and its devices come back into the slice. A node where no such id holds
// anything never asks the kubelet.

// leftovers collects one driver's device-plugin ids.
type leftovers struct {
	resource string // the device-plugin resource of the type, "<suffix>/<type>"
	tracker  *podgc.Tracker
}

// collectLeftovers runs one scan at now over every driver that holds
// device-plugin ids. A kubelet that cannot be asked, or that lists no pod
// at all (it has just started), makes the scan count for nothing.
func (p *Plugin) collectLeftovers(ctx context.Context, now time.Time) {
	var due []*driver
	for _, d := range p.drivers {
		if len(podgc.Held(d.lifecycle.poller.Inventory().Holders, d.typ)) > 0 {
			due = append(due, d)
		}
	}
	if len(due) == 0 {
		return
	}
	socket := filepath.Join(p.opt.KubeletDir, podgc.Socket)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := podgc.List(ctx, socket)
	if err != nil {
		if !p.podResourcesFailing {
			p.log.Warn("device-plugin ids hold devices, and the kubelet's pod resources cannot be listed; they stay held until it can", "err", err)
		}
		p.podResourcesFailing = true
		return
	}
	if p.podResourcesFailing {
		p.log.Info("the kubelet's pod resources can be listed again")
		p.podResourcesFailing = false
	}
	if l.Pods == 0 {
		p.log.Debug("the kubelet lists no pods (it may have just started); device-plugin ids scan skipped")
		return
	}
	for _, d := range due {
		live := map[string]bool{}
		for _, c := range l.Containers {
			if c.Resource == d.lifecycle.leftovers.resource {
				live[podgc.RequestID(c.Resource, d.typ, c.DeviceIDs)] = true
			}
		}
		if d.lifecycle.collectLeftovers(ctx, now, live) > 0 {
			d.refresh(ctx) // their devices come back into the slice
		}
	}
}

// collectLeftovers frees the driver's device-plugin ids that are due, and
// returns how many it freed.
func (lc *lifecycle) collectLeftovers(ctx context.Context, now time.Time, live map[string]bool) (freed int) {
	held := podgc.Held(lc.poller.Inventory().Holders, lc.typ)
	for _, v := range lc.leftovers.tracker.Scan(now, held, live) {
		var errs []error
		for _, conf := range lc.poller.Configs() {
			_, err := lc.caller.Del(ctx, conf, v.ID)
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			lc.log.Error("freeing a device-plugin id failed; trying again next scan", "requestId", v.ID, "err", err)
			continue
		}
		lc.leftovers.tracker.Forget(v.ID)
		freed++
		lc.log.Info("freed a device-plugin id: its pod is gone", "requestId", v.ID, "scans", v.Scans, "absentFor", v.Absent.Round(time.Second))
	}
	return freed
}
