package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/test/fixture"
)

// hangPlugin lists one device and hangs on ADD, and on DEVICES too once
// the file <dir>/hang-now exists.
const hangPlugin = `#!/bin/sh
cat >/dev/null
case "$CDI_COMMAND" in
VERSION) echo '{"cdiVersion":"0.0.2","supportedVersions":["0.0.1","0.0.2"]}' ;;
DEVICES)
  [ -e "$(dirname "$0")/hang-now" ] && exec sleep 600
  echo '{"cdiVersion":"0.0.2","devices":[{"key":"d0","nodes":["/dev/null"],"numa":-1,"usable":true}]}' ;;
*) exec sleep 600 ;;
esac
`

// A plugin that hangs is bounded by the plugin timeout: Allocate fails
// with DeadlineExceeded, and the mode keeps serving.
func TestHangingPlugin(t *testing.T) {
	n := newNode(t, fixture.Host{}, map[string]string{
		"thing.d/hang.conf": `{"cdiVersion":"0.0.2","name":"h","type":"thing","plugin":"hang"}`,
	})
	scripts := t.TempDir()
	if err := os.WriteFile(filepath.Join(scripts, "hang"), []byte(hangPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	opt := n.options()
	// VERSION and DEVICES answer in milliseconds; Allocate and the
	// hanging DEVICES wait the timeout out.
	opt.Caller.Path, opt.Caller.Timeout = scripts, 5*time.Second
	opt.Types = []string{"thing"}
	n.start(opt)
	c := n.kubelet.Dial(n.register().Endpoint)
	if got := n.watch(c).next(); !slices.Equal(got, []string{"d0:" + api.Healthy}) {
		t.Fatalf("devices %v", got)
	}
	_, err := allocate(c, "d0")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Allocate: %v, want DeadlineExceeded", err)
	}
	// DEVICES hangs too now: the last list stays.
	if err := os.WriteFile(filepath.Join(scripts, "hang-now"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := n.mode.res[0]
	r.refresh(context.Background())
	if devs, _ := r.Devices(); len(devs) != 1 || devs[0].ID != "d0" {
		t.Fatalf("devices after a hanging DEVICES: %+v", devs)
	}
	if _, err := c.GetDevicePluginOptions(context.Background(), &api.Empty{}); err != nil {
		t.Fatal(err)
	}
}
