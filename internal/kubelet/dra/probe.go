package dra

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Name implements probe.Check: the driver's name.
func (d *driver) Name() string { return d.name }

// Live implements probe.Check: the registration socket answers GetInfo
// for this driver, as the kubelet's plugin watcher asks it, and the DRA
// service's socket accepts a connection.
func (d *driver) Live(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+d.regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	defer conn.Close()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("registration socket %s: %w", d.regSock, err)
	}
	if info.Name != d.name {
		return fmt.Errorf("registration socket %s: answers for driver %q", d.regSock, info.Name)
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", d.draSock)
	if err != nil {
		return fmt.Errorf("DRA socket: %w", err)
	}
	return c.Close()
}

// Ready implements probe.Check: the kubelet has registered the driver
// (it called NotifyRegistrationStatus with success), and the API server
// has the node's ResourceSlices with every device the driver offers.
// PublishResources only hands the devices to the slice controller, which
// writes them in the background and reports its failures to HandleError;
// so Ready looks the slices up until it has seen them written, and again
// after each failure the controller reported.
func (d *driver) Ready(ctx context.Context) error {
	d.mu.Lock()
	h, st := d.helper, d.registration
	d.mu.Unlock()
	if h == nil {
		return errors.New("not started")
	}
	switch {
	case st == nil:
		return errors.New("not registered with the kubelet yet")
	case !st.PluginRegistered:
		return fmt.Errorf("the kubelet refused the registration: %s", st.Error)
	}
	return d.publisher.ready(ctx)
}

// ready says whether the API server has the node's ResourceSlices with
// every device offered.
func (pb *publisher) ready(ctx context.Context) error {
	pb.mu.Lock()
	published, written, failed := pb.published, pb.written, pb.sliceErr
	pb.mu.Unlock()
	switch {
	case !published:
		return errors.New("the ResourceSlice is not published yet")
	case written && failed == nil:
		return nil
	}
	if err := pb.confirmWritten(ctx); err != nil {
		if failed != nil {
			return fmt.Errorf("writing the ResourceSlice failed: %w", failed)
		}
		return err
	}
	return nil
}

// confirmWritten looks up the node's ResourceSlices of the driver, and
// records them written when they list every device the driver offers.
func (pb *publisher) confirmWritten(ctx context.Context) error {
	sel := fields.Set{"spec.driver": pb.name, "spec.nodeName": pb.node}.AsSelector().String()
	l, err := pb.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Errorf("looking up the ResourceSlice: %w", err)
	}
	listed := map[string]bool{}
	for _, s := range l.Items {
		if s.Spec.Driver == pb.name && s.Spec.Pool.Name == pb.node && s.Spec.NodeName != nil && *s.Spec.NodeName == pb.node {
			for _, dev := range s.Spec.Devices {
				listed[dev.Name] = true
			}
		}
	}
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if len(l.Items) == 0 {
		return errors.New("the API server has no ResourceSlice of the driver yet")
	}
	for _, dev := range pb.offered {
		if !listed[dev.Name] {
			return fmt.Errorf("the API server's ResourceSlices lack device %s yet", dev.Name)
		}
	}
	pb.written, pb.sliceErr = true, nil
	return nil
}
