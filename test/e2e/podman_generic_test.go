package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/test/fixture"
)

// devCheck is the test program run inside the containers: it opens each
// node named on its command line; for /dev/kvm it asks KVM_GET_API_VERSION
// (ioctl 0xAE00), which the kernel answers 12.
const devCheck = `package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	for _, p := range os.Args[1:] {
		fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			fmt.Printf("%s: %v\n", p, err)
			os.Exit(1)
		}
		if p == "/dev/kvm" {
			v, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), 0xAE00, 0)
			if errno != 0 {
				fmt.Printf("%s: KVM_GET_API_VERSION: %v\n", p, errno)
				os.Exit(1)
			}
			fmt.Printf("%s KVM_GET_API_VERSION=%d\n", p, v)
		} else {
			fmt.Printf("%s opened\n", p)
		}
		syscall.Close(fd)
	}
}
`

// realMisc checks that the machine has the misc device m as the kernel
// numbers it, or skips saying which is missing.
func realMisc(t *testing.T, m fixture.Misc) {
	t.Helper()
	devname := m.DevName
	if devname == "" {
		devname = m.Name
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/"+devname, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR ||
		unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != uint32(m.Minor) {
		t.Skipf("this machine has no /dev/%s (10:%d): %v", devname, m.Minor, err)
	}
}

// TestPodmanGenericRealDevices gives containers this machine's real
// /dev/kvm, /dev/fuse and /dev/net/tun through the generic plugin's CDI
// specs. The plugin reads a fixture root whose dev/ holds nodes with the
// real numbers (10:232, 10:229, 10:200), so the specs name the real
// devices and podman makes them in the containers; nothing of the live
// /dev is changed, only opened inside the containers. Three containers
// hold the three kvm shares at once and each gets KVM_GET_API_VERSION 12
// from a static test program; a fourth ADD gets 103; tun and fuse open.
func TestPodmanGenericRealDevices(t *testing.T) {
	for _, m := range []fixture.Misc{fixture.KVM, fixture.FUSE, fixture.TUN} {
		realMisc(t, m)
	}
	pm := newPodman(t)
	bin := filepath.Join(pm.rootfs, "bin", "devcheck")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(devCheck), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module devcheck\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test program: %v\n%s", err, out)
	}

	n := newNode(t, fixture.Host{Misc: []fixture.Misc{fixture.KVM, fixture.FUSE, fixture.TUN}})
	kindKVM := fmt.Sprintf("e2e%d.cdi-exec.test/kvm", os.Getpid())
	kindNet := fmt.Sprintf("e2e%d.cdi-exec.test/vdev", os.Getpid())
	kvmConf := `{"cdiVersion":"0.0.2","name":"kvm","type":"kvm","plugin":"generic","args":{"rules":[{"paths":["/dev/kvm"],"shares":3,"permissions":"rw"}],` +
		`"cdi_spec":{"kind":"` + kindKVM + `","dir":"` + pm.specs + `"}}}`
	vdevConf := `{"cdiVersion":"0.0.2","name":"vdev","type":"vdev","plugin":"generic","args":{"rules":[{"paths":["/dev/fuse","/dev/net/tun"],"shares":3,"permissions":"rw"}],` +
		`"cdi_spec":{"kind":"` + kindNet + `","dir":"` + pm.specs + `"}}}`
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = fmt.Sprintf("e2e%d-%d", os.Getpid(), i)
		id := ids[i]
		t.Cleanup(func() { n.run("generic", kvmConf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id) })
		r := n.run("generic", kvmConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID="+id)
		if r.status != 0 || strings.Join(r.devices(t), " ") != "/dev/kvm" {
			t.Fatalf("ADD %s: %s %s", id, r.stdout, r.stderr)
		}
	}
	if r := n.run("generic", kvmConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=fourth"); r.code(t) != 103 {
		t.Fatalf("4th ADD with 3 shares: %s", r.stdout)
	}
	// The first request takes fuse and tun too.
	if r := n.run("generic", vdevConf, "CDI_COMMAND=ADD", "CDI_REQUEST=vdev:2", "CDI_REQUEST_ID="+ids[0]); r.status != 0 ||
		strings.Join(r.devices(t), " ") != "/dev/fuse /dev/net/tun" {
		t.Fatalf("ADD fuse and tun: %s %s", r.stdout, r.stderr)
	}

	outs := make([]string, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			args := []string{"--device", kindKVM + "=" + id}
			check := []string{"/bin/devcheck", "/dev/kvm"}
			if i == 0 {
				args = append(args, "--device", kindNet+"="+id)
				check = append(check, "/dev/fuse", "/dev/net/tun")
			}
			outs[i], errs[i] = pm.run(append(args, check...)...)
		})
	}
	wg.Wait()
	for i, id := range ids {
		t.Logf("container %s:\n%s", id, outs[i])
		if errs[i] != nil {
			t.Errorf("container %s: %v\n%s", id, errs[i], outs[i])
			continue
		}
		want := "/dev/kvm KVM_GET_API_VERSION=12"
		if i == 0 {
			want += "\n/dev/fuse opened\n/dev/net/tun opened"
		}
		if got := strings.TrimSpace(outs[i]); got != want {
			t.Errorf("container %s printed:\n%s\nwant:\n%s", id, got, want)
		}
	}
	// After DEL the name no longer resolves, and the share is free again.
	if r := n.run("generic", kvmConf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+ids[2]); r.status != 0 || r.stdout != "" {
		t.Fatalf("DEL: %s", r.stdout)
	}
	if out, err := pm.run("--device", kindKVM+"="+ids[2], "/bin/true"); err == nil {
		t.Fatalf("podman still resolves %s after DEL:\n%s", ids[2], out)
	}
	if r := n.run("generic", kvmConf, "CDI_COMMAND=ADD", "CDI_REQUEST=kvm:1", "CDI_REQUEST_ID=fourth"); r.status != 0 {
		t.Fatalf("ADD after a DEL: %s", r.stdout)
	}
	n.run("generic", kvmConf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=fourth")
}
