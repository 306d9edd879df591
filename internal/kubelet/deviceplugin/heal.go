package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/internal/kubelet/specheal"
	"github.com/cdi-exec/plugins/pkg/caller"
)

// This file puts back the CDI spec files of the allocations the kubelet
// holds (internal/kubelet/specheal). The kubelet keeps the CDI names an
// Allocate answered and gives them to the runtime at every restart of
// the container, without asking again: a spec file gone from the spec
// directory fails each restart until the pod ends. What the kubelet
// holds is what its PodResources API lists; each listed container's
// request-id must have the spec file of every config that holds some of
// its devices, and a missing one is written again by the same pinned ADD
// as Allocate's, a replay.

// listTimeout bounds one PodResources List of the healer: a restore asks
// while it holds the lock Allocate takes.
const listTimeout = 10 * time.Second

// healer returns the healer of the resource's spec files.
func (b *Plugin) healer(r *resource) *specheal.Healer {
	var dirs []string
	for _, s := range r.specs {
		if s != nil && !slices.Contains(dirs, s.Dir) {
			dirs = append(dirs, s.Dir)
		}
	}
	return &specheal.Healer{
		Driver: r.name, Dirs: dirs, Log: r.log, Metrics: r.metrics,
		Records: &heldRecords{r: r, socket: b.podResources()},
	}
}

// heldRecords are the allocations of one resource the kubelet lists.
type heldRecords struct {
	r      *resource
	socket string // the kubelet's PodResources socket
}

// Expected implements specheal.Records: one entry per request-id of the
// resource the kubelet lists, its Data the container's device ids.
func (h *heldRecords) Expected(ctx context.Context) ([]specheal.Entry, error) {
	l, err := h.list(ctx)
	if err != nil {
		return nil, err
	}
	inv := h.r.poller.Inventory()
	var out []specheal.Entry
	for _, c := range l.Containers {
		if c.Resource != h.r.name {
			continue
		}
		id := podgc.RequestID(h.r.name, h.r.typ, c.DeviceIDs)
		if slices.ContainsFunc(out, func(e specheal.Entry) bool { return e.ID == id }) {
			continue // the same devices in another container: one allocation
		}
		e := specheal.Entry{ID: id, Data: c.DeviceIDs}
		for _, g := range inv.Groups(inv.Order(c.DeviceIDs)) {
			if s := h.r.specs[g.Conf]; s != nil {
				e.Files = append(e.Files, specheal.SpecFile(s, id))
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// list asks the kubelet for its pods' devices, within listTimeout.
func (h *heldRecords) list(ctx context.Context) (podgc.Listing, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	return podgc.List(ctx, h.socket)
}

// Restore implements specheal.Records: the allocation's pinned ADDs
// again, replays that write its spec files from the stores' records.
// Under the lock the garbage collector's frees take, the kubelet is
// asked once more: an id it no longer lists may be freed any moment, and
// is left alone (specheal.ErrFreed); one it lists is touched, so that no free judged before
// goes ahead.
func (h *heldRecords) Restore(ctx context.Context, e specheal.Entry) error {
	r := h.r
	r.handout.Lock()
	defer r.handout.Unlock()
	l, err := h.list(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(l.Containers, func(c podgc.Container) bool {
		return c.Resource == r.name && podgc.RequestID(r.name, r.typ, c.DeviceIDs) == e.ID
	}) {
		return fmt.Errorf("the kubelet no longer lists %s: %w", e.ID, specheal.ErrFreed)
	}
	r.gc.Touch(e.ID, time.Now())
	ids, _ := e.Data.([]string)
	if _, err := r.add(ctx, e.ID, ids); err != nil {
		return fmt.Errorf("replaying the allocation of %v: %w", ids, err)
	}
	return nil
}

// specsOf returns the cdi_spec of each config, nil where it cannot be
// read (Configs gave each one, so none should be).
func specsOf(confs []caller.Config, log *slog.Logger) []*cdispec.Config {
	out := make([]*cdispec.Config, len(confs))
	for i, c := range confs {
		s, err := inventory.Spec(c)
		if err != nil {
			log.Warn("the spec files of this config will not be put back", "err", err)
			continue
		}
		out[i] = s
	}
	return out
}
