package dra

import (
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// The generic plugin through the DRA driver: kvm with three shares is
// three devices in the slice (kvm, and kvm-s1, kvm-s2 by their names), three
// claims each prepare one share and get /dev/kvm; a serial adapter
// carries its USB serial as an attribute for CEL selectors.
func TestGenericSharesAndAttributes(t *testing.T) {
	if got := fixture.NodesIn(t.TempDir()); got != fixture.RealNodes {
		t.Skipf("needs real device nodes (CAP_MKNOD), and this machine makes %s: the generic plugin finds path rules' devices by number", got)
	}
	const kvmDriver, serialDriver = "kvm.cdi-exec.io", "usbserial.cdi-exec.io"
	n := newNode(t, fixture.GenericDevices(), map[string]string{
		"kvm.d/generic.conf":       `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":3}]}}`,
		"usbserial.d/generic.conf": `{"cdiVersion":"0.0.2","name":"s","type":"usbserial","plugin":"generic","args":{"rules":[{"paths":["/dev/ttyUSB*"],"usb":{"vendor":"1a86"}}]}}`,
	})
	n.start(n.options())
	n.waitSlice(kvmDriver, []string{"kvm", "x-kvm-0s1", "x-kvm-0s2"})
	serials := n.waitSlice(serialDriver, []string{"x-1a86-27523-2-a50285-b-i", "x-1a86-27523-2-b71234-x-y", "x-1a86-27523-2port-01-03"})
	if v := serials[1].Attributes["usbSerial"].StringValue; v == nil || *v != "B71234XY" {
		t.Errorf("usbSerial of %s: %v", serials[1].Name, serials[1].Attributes)
	}
	if v := serials[0].Attributes["class"].StringValue; v == nil || *v != "tty" {
		t.Errorf("class of %s: %v", serials[0].Name, serials[0].Attributes)
	}
	for i, dev := range []string{"x-kvm-0s2", "kvm", "x-kvm-0s1"} {
		c := n.claim("vm"+dev, uid(100+i), kvmDriver, dev)
		got := n.prepare(kvmDriver, c)
		if got.Error != "" {
			t.Fatalf("prepare %s: %s", dev, got.Error)
		}
		if len(got.Devices) != 1 || len(got.Devices[0].CdiDeviceIds) != 1 {
			t.Fatalf("prepare %s: %+v", dev, got.Devices)
		}
		if nodes := n.specNodes(got.Devices[0].CdiDeviceIds); strings.Join(nodes, " ") != "/dev/kvm" {
			t.Fatalf("prepare %s: the container gets %v", dev, nodes)
		}
	}
	// Every share is held, each by one claim; a claim for a share device
	// held already (the scheduler would not make it) fails.
	c := n.claim("vm-extra", uid(200), kvmDriver, "kvm")
	if got := n.prepare(kvmDriver, c); got.Error == "" {
		t.Fatalf("a fourth share: %+v", got.Devices)
	}
}
