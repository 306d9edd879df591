package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pr "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
)

// A type that moved from the DRA mode to this mode: the claims the DRA
// driver prepared stay held while a pod of the kubelet's list uses them,
// and are freed, their records dropped, once no pod does for two scans
// and the grace period. Admin-access claims (no keys) and ids of other
// callers are left alone.
func TestCollectDRAClaims(t *testing.T) {
	n := &gcNode{node: ttyNode(t)}
	dir := filepath.Join(t.TempDir(), "dra")
	records, err := claimstate.Open(dir, "tty.cdi-exec.io")
	if err != nil {
		t.Fatal(err)
	}
	const running, ended = "0b2c3d4e-0000-4000-8000-000000000001", "0b2c3d4e-0000-4000-8000-000000000002"
	// As the DRA mode prepared them: a pinned ADD under the claim's UID,
	// and a record.
	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID="+running, "CDI_REQUEST_DEVICES=tty14")
	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID="+ended, "CDI_REQUEST_DEVICES=tty15")
	n.plugin("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod")
	err = records.Update(context.Background(), func(cs claimstate.Claims) error {
		cs[running] = claimstate.Claim{UID: running, Namespace: "default", Name: "runs", Keys: []string{"tty14"}, Prepared: true}
		cs[ended] = claimstate.Claim{UID: ended, Namespace: "default", Name: "ended", Keys: []string{"tty15"}, Prepared: true}
		cs["0b2c3d4e-0000-4000-8000-000000000003"] = claimstate.Claim{UID: "0b2c3d4e-0000-4000-8000-000000000003", Namespace: "default", Name: "admin", AdminKeys: []string{"tty14"}, Prepared: true}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n.kubelet.SetPods(&pr.PodResources{Namespace: "default", Name: "p", Containers: []*pr.ContainerResources{{
		Name: "c", DynamicResources: []*pr.DynamicResource{{ClaimName: "runs", ClaimNamespace: "default"}},
	}}})
	opt := n.options()
	opt.ClaimStateDir = dir
	n.start(opt)
	grace := opt.Grace
	t0 := time.Now()
	all := sorted(running, ended, "cdictl-pod")
	for i, s := range []struct {
		at   time.Duration
		want []string
	}{
		{0, all},
		{time.Second, all},
		{grace - time.Second, all},
		{grace, sorted(running, "cdictl-pod")},
		{10 * grace, sorted(running, "cdictl-pod")},
	} {
		for _, r := range n.mode.res {
			r.refresh(context.Background())
		}
		if err := n.mode.collect(context.Background(), t0.Add(s.at)); err != nil {
			t.Fatal(err)
		}
		if got := n.holders(); !slices.Equal(got, s.want) {
			t.Fatalf("step %d (+%v): held by %v, want %v", i, s.at, got, s.want)
		}
	}
	cs, err := records.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cs[ended]; ok || len(cs) != 2 {
		t.Fatalf("the records after the free: %v", cs)
	}
}

// Without the DRA mode's directory nothing is read, and nothing is made.
func TestNoDRAClaimRecords(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.ClaimStateDir = filepath.Join(t.TempDir(), "absent")
	n.start(opt)
	if r := n.mode.res[0]; r.claims != nil {
		t.Fatalf("claim records opened at %s", r.claims.Path())
	}
	if _, err := os.Stat(opt.ClaimStateDir); !os.IsNotExist(err) {
		t.Fatalf("the DRA mode's directory was made: %v", err)
	}
}
