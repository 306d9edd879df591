package podgc

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func ids(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

// step is one scan: at t0+at, with held and live ids, and the ids due.
type step struct {
	at    time.Duration
	touch []string // touched just before the scan
	reset bool     // the kubelet restarted just before the scan
	held  []string
	live  []string
	due   []string
}

func TestTracker(t *testing.T) {
	const grace = time.Minute
	tests := []struct {
		name  string
		steps []step
	}{
		{"live ids are kept", []step{
			{at: 0, held: []string{"a"}, live: []string{"a"}},
			{at: time.Hour, held: []string{"a"}, live: []string{"a"}},
			{at: 2 * time.Hour, held: []string{"a"}, live: []string{"a"}},
		}},
		{"two scans are not enough within the grace", []step{
			{at: 0, held: []string{"a"}, live: []string{"a"}},
			{at: time.Hour, held: []string{"a"}},
			{at: time.Hour + time.Second, held: []string{"a"}},
			{at: time.Hour + grace - time.Nanosecond, held: []string{"a"}},
			{at: time.Hour + grace, held: []string{"a"}, due: []string{"a"}},
		}},
		{"the grace is not enough with one scan", []step{
			{at: 0, held: []string{"a"}, live: []string{"a"}},
			{at: time.Hour, held: []string{"a"}},
			{at: 3 * time.Hour, held: []string{"a"}, due: []string{"a"}},
		}},
		{"one scan present resets the count", []step{
			{at: 0, held: []string{"a"}},
			{at: grace, held: []string{"a"}, live: []string{"a"}},
			{at: 2 * grace, held: []string{"a"}},
			{at: 2*grace + time.Second, held: []string{"a"}},
			{at: 3 * grace, held: []string{"a"}, due: []string{"a"}},
		}},
		{"an id first seen counts its age from then", []step{
			{at: 0, held: []string{"a"}},
			{at: grace / 2, held: []string{"a"}},
			{at: grace, held: []string{"a"}, due: []string{"a"}},
		}},
		{"a fresh Allocate waits a grace period even when absent", []step{
			{at: 0, touch: []string{"a"}},
			{at: time.Second},
			{at: 2 * time.Second},
			{at: grace - time.Nanosecond},
			{at: grace, due: []string{"a"}},
		}},
		{"touching again restarts the grace", []step{
			{at: 0, held: []string{"a"}},
			{at: grace - time.Second, touch: []string{"a"}, held: []string{"a"}},
			{at: grace + time.Second, held: []string{"a"}},
			{at: 2*grace - time.Second, held: []string{"a"}, due: []string{"a"}},
		}},
		{"a kubelet restart forgets the absences", []step{
			{at: 0, held: []string{"a"}},
			{at: grace / 2, held: []string{"a"}},
			{at: grace, reset: true, held: []string{"a"}},
			{at: 2 * grace, held: []string{"a"}, due: []string{"a"}},
		}},
		{"ids are judged apart", []step{
			{at: 0, held: []string{"a", "b"}, live: []string{"b"}},
			{at: grace, held: []string{"a", "b"}, live: []string{"b"}, due: []string{"a"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(grace)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				for _, id := range s.touch {
					tr.Touch(id, now)
				}
				if s.reset {
					tr.Reset()
				}
				live := map[string]bool{}
				for _, id := range s.live {
					live[id] = true
				}
				got := ids(tr.Scan(now, s.held, live))
				if !slices.Equal(got, s.due) {
					t.Fatalf("step %d: due %v, want %v", i, got, s.due)
				}
			}
		})
	}
}

func TestForget(t *testing.T) {
	tr := NewTracker(0)
	tr.Touch("a", t0)
	tr.Scan(t0, nil, nil)
	v := tr.Scan(t0, nil, nil)
	if len(v) != 1 || v[0].Scans != 2 {
		t.Fatalf("got %+v", v)
	}
	tr.Forget("a")
	if v := tr.Scan(t0, nil, nil); len(v) != 0 {
		t.Fatalf("forgotten id still due: %+v", v)
	}
}

func TestDue(t *testing.T) {
	tr := NewTracker(0)
	tr.Scan(t0, []string{"a"}, nil)
	if tr.Due("a") {
		t.Fatal("due after one scan")
	}
	if v := tr.Scan(t0, []string{"a"}, nil); len(v) != 1 || !tr.Due("a") {
		t.Fatalf("not due after two scans: %+v", v)
	}
	tr.Touch("a", t0)
	if tr.Due("a") {
		t.Fatal("still due after an Allocate")
	}
	if tr.Due("unknown") {
		t.Fatal("an unknown id is due")
	}
}
