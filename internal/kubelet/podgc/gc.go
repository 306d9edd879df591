package podgc

// This file decides when the device-plugin mode frees an allocation.
//
// The device-plugin API never tells a plugin that a container is gone, so
// the mode compares what its plugins hold with what the kubelet's
// PodResources API lists, scan after scan. A Tracker frees a request-id
// only when it has been absent from two scans in a row and both its
// absence and its last Allocate are older than the grace period. It knows
// nothing of who made an id: the caller passes only its own ids.

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Tracker remembers, per request-id, since when it has been absent. It is
// safe for concurrent use.
type Tracker struct {
	grace time.Duration

	mu  sync.Mutex
	ids map[string]*gcState
}

type gcState struct {
	touched time.Time // last Allocate, or when this Tracker first saw the id
	absent  int       // consecutive scans without the id
	since   time.Time // the first of those scans
}

// NewTracker returns a Tracker with the given grace period.
func NewTracker(grace time.Duration) *Tracker {
	return &Tracker{grace: grace, ids: map[string]*gcState{}}
}

// Verdict is an id to free and why.
type Verdict struct {
	ID     string
	Scans  int           // consecutive scans it was absent from
	Absent time.Duration // since the first of them
}

// Touch records that id was handed out at now: a fresh Allocate is not in
// PodResources yet, so it starts its grace period again.
func (t *Tracker) Touch(id string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ids[id] = &gcState{touched: now}
}

// Reset forgets every absence seen so far; the mode calls it when the
// kubelet restarts, because a kubelet that has just started may list no
// pods at all.
func (t *Tracker) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.ids {
		s.absent, s.since = 0, time.Time{}
	}
}

// Forget drops id after it was freed or found to hold nothing.
func (t *Tracker) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ids, id)
}

// Due reports whether id is still due to be freed: no Allocate and no
// scan that listed it came after the Scan that judged it due.
func (t *Tracker) Due(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ids[id]
	return s != nil && s.absent >= 2
}

// Scan takes one successful PodResources scan at now. held lists the ids
// that hold devices now (the caller's own only), live those the kubelet
// lists. Ids touched before stay tracked even when they are not in held.
// Scan returns the ids due to be freed, in id order; they stay tracked
// until Forget.
func (t *Tracker) Scan(now time.Time, held []string, live map[string]bool) []Verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range held {
		if t.ids[id] == nil {
			t.ids[id] = &gcState{touched: now}
		}
	}
	var due []Verdict
	for _, id := range slices.Sorted(maps.Keys(t.ids)) {
		s := t.ids[id]
		if live[id] {
			s.absent, s.since = 0, time.Time{}
			continue
		}
		if s.absent == 0 {
			s.since = now
		}
		s.absent++
		if s.absent >= 2 && now.Sub(s.since) >= t.grace && now.Sub(s.touched) >= t.grace {
			due = append(due, Verdict{ID: id, Scans: s.absent, Absent: now.Sub(s.since)})
		}
	}
	return due
}
