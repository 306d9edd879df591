package dra

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
// (it called NotifyRegistrationStatus with success), and the driver has
// published its slice at least once.
func (d *driver) Ready() error {
	d.mu.Lock()
	h, published := d.helper, d.published
	d.mu.Unlock()
	if h == nil {
		return errors.New("not started")
	}
	switch st := h.RegistrationStatus(); {
	case st == nil:
		return errors.New("not registered with the kubelet yet")
	case !st.PluginRegistered:
		return fmt.Errorf("the kubelet refused the registration: %s", st.Error)
	case !published:
		return errors.New("the ResourceSlice is not published yet")
	}
	return nil
}
