package dra

import (
	"context"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// WatchHealthStatus is the kubelet's
// resource health stream (NodeWatchResources), which it shows in the
// status of the pods that hold the devices. Every device of the slice is
// Healthy, but a tainted one (offer) is Unhealthy with the plugin's reason
// as message. A report goes out at once, again whenever the slice
// changes, and every poll interval in between, since the kubelet calls a
// device's health unknown when no report came within its timeout.
func (pb *publisher) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(pb.every)
	defer tick.Stop()
	for {
		pb.mu.Lock()
		report, changed := pb.healthReport(), pb.changed
		pb.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// healthReport is the health of every device offered. Called with mu
// held.
func (pb *publisher) healthReport() kubeletplugin.DeviceHealthReport {
	timeout := max(30*time.Second, 3*pb.every)
	var r kubeletplugin.DeviceHealthReport
	for _, dev := range pb.offered {
		h := kubeletplugin.DeviceHealth{PoolName: pb.node, DeviceName: dev.Name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: pb.refreshed, HealthCheckTimeout: timeout}
		if u, ok := pb.unhealthy[dev.Name]; ok && len(dev.Taints) > 0 {
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, u.reason
		}
		r.Devices = append(r.Devices, h)
	}
	return r
}
