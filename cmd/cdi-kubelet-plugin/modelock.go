package main

import (
	"context"
	"strings"

	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/internal/kubelet/modelock"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// lockDevicePlugin takes the device-plugin mode's lock on the mode's
// resource types in the plugins' state directory, so that the dra mode
// cannot serve them at the same time (internal/kubelet/modelock).
func lockDevicePlugin(ctx context.Context, e env, b *deviceplugin.Plugin, prefix string) (*modelock.Lock, error) {
	var types []string
	for _, r := range b.Resources() {
		types = append(types, strings.TrimPrefix(r, prefix+"/"))
	}
	penv, _ := protocol.ReadEnv(e.getenv) // a bad CDI_LOCK_TIMEOUT is the plugins' to report
	return modelock.Acquire(ctx, penv.StateDir, modelock.DevicePlugin, types)
}
