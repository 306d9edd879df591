package caller

import (
	"context"
	"fmt"
	"strings"

	"github.com/cdi-exec/plugins/pkg/request"
)

// AddDevices runs a pinned ADD (docs/protocol.md#extension-pinned-add): it asks one
// plugin for exactly the devices named by keys, the keys its DEVICES
// answer reports, as len(keys) of spec.
func (c Caller) AddDevices(ctx context.Context, conf Config, id string, spec request.Spec, keys []string) (*Added, error) {
	req := request.Request{Items: []request.Item{{Spec: spec, Amount: len(keys)}}}
	return c.add(ctx, conf, []string{
		"CDI_REQUEST=" + req.String(),
		"CDI_REQUEST_ID=" + id,
		"CDI_REQUEST_DEVICES=" + strings.Join(keys, ","),
	})
}

// ReservedPrefix starts every request-id a Kubernetes mode of cdi-kubelet-plugin makes
// (docs/kubernetes.md#request-ids). Other callers must not use it, so that
// a mode's garbage collection can never free what they hold.
const ReservedPrefix = "k8s-"

// CheckOwnID refuses a request-id that a caller other than cdi-kubelet-plugin wants to allocate under, when it lies in the reserved namespace.
func CheckOwnID(id string) error {
	if strings.HasPrefix(id, ReservedPrefix) {
		return fmt.Errorf("request-id %q: ids starting with %q are reserved for the Kubernetes bridges", id, ReservedPrefix)
	}
	return nil
}
