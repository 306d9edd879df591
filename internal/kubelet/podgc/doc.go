// Package podgc is the device-plugin mode's side of the shared ledger:
// the request-ids it makes for the kubelet's Allocate calls, the
// kubelet's PodResources list of which containers hold which device ids,
// and the tracker that decides when an id whose pod is gone is freed.
//
// Both Kubernetes modes use it: the device-plugin mode for its own ids,
// and the DRA mode for the ids a device-plugin mode left behind when a
// type moved from one mode to the other (docs/kubernetes.md, "Moving a
// type between modes").
package podgc
