//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// draGates are the feature gates of what the suite drives (docs/kubernetes.md,
// "Feature gates"): admin access, prioritized lists (firstAvailable),
// device taints, extended resources through DRA, the health of
// allocated devices in the pod's status, partitionable devices (SR-IOV
// VFs consuming their PF's counters) and claim device status.
var draGates = []string{"DRAAdminAccess", "DRAPrioritizedList", "DRADeviceTaints", "DRAExtendedResource", "ResourceHealthStatus",
	"DRAPartitionableDevices", "DRAResourceClaimDeviceStatus"}

// gateLine is how a component's --help lists a gate that can still be
// set: "DRADeviceTaints=true|false (BETA - default=false)". Gates that
// went GA and are locked on are no longer listed.
var gateLine = regexp.MustCompile(`\b(\w+)=true\|false \((ALPHA|BETA|GA|DEPRECATED) - default=(true|false)\)`)

// featureGates returns the gates of draGates that bin (a Kubernetes
// component of the pinned release) lists as off by default, to be turned
// on, and no others: on 1.37 none, on 1.35 several.
func featureGates(ctx context.Context, bin string) (map[string]bool, error) {
	out, err := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --help: %w", bin, err)
	}
	on := map[string]bool{}
	for _, m := range gateLine.FindAllStringSubmatch(string(out), -1) {
		if slices.Contains(draGates, m[1]) && m[3] == "false" {
			on[m[1]] = true
		}
	}
	return on, nil
}

// gateFlag renders gates as a --feature-gates value, "" for none.
func gateFlag(gates map[string]bool) string {
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(gates)) {
		parts = append(parts, fmt.Sprintf("%s=%v", g, gates[g]))
	}
	return strings.Join(parts, ",")
}
