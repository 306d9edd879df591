// Command ocispec writes the OCI runtime config of a one-shot container
// with CDI devices injected by the CDI library, from the spec files a
// plugin wrote: what podman, containerd and CRI-O do before they call
// runc, for a machine that has runc but none of them
// (scripts/gpu-container-check.sh). Usage:
//
//	ocispec -spec-dir DIR -device vendor.com/class=name [-device ...] -rootfs DIR -bundle DIR -- command args...
//
// It writes BUNDLE/config.json and prints the devices, mounts and
// environment the CDI devices brought.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ocispec:", err)
		os.Exit(1)
	}
}

func run(argv []string) error {
	fs := flag.NewFlagSet("ocispec", flag.ContinueOnError)
	specDir := fs.String("spec-dir", "", "directory of CDI spec files")
	rootfs := fs.String("rootfs", "", "root directory of the container")
	bundle := fs.String("bundle", "", "bundle directory to write config.json to")
	var devices list
	fs.Var(&devices, "device", "fully qualified CDI device name (repeatable)")
	if err := fs.Parse(argv); err != nil {
		return err
	}
	if *specDir == "" || *rootfs == "" || *bundle == "" || len(devices) == 0 || fs.NArg() == 0 {
		return fmt.Errorf("usage: ocispec -spec-dir DIR -device NAME -rootfs DIR -bundle DIR -- command args")
	}
	spec := Base(*rootfs, fs.Args())
	cache, err := cdi.NewCache(cdi.WithSpecDirs(*specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "ocispec: spec %s: %v\n", path, e)
		}
	}
	if unresolved, err := cache.InjectDevices(spec, devices...); err != nil {
		return fmt.Errorf("injecting %v (unresolved %v): %w", devices, unresolved, err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*bundle, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*bundle, "config.json"), b, 0o644); err != nil {
		return err
	}
	for _, d := range spec.Linux.Devices {
		fmt.Printf("device %s %s %d:%d\n", d.Path, d.Type, d.Major, d.Minor)
	}
	for _, m := range spec.Mounts {
		if m.Type == "bind" || strings.Contains(strings.Join(m.Options, ","), "bind") {
			fmt.Printf("mount %s -> %s %v\n", m.Source, m.Destination, m.Options)
		}
	}
	for _, e := range spec.Process.Env {
		fmt.Printf("env %s\n", e)
	}
	return nil
}

// Base is the config of a plain, unprivileged one-shot container, as
// `runc spec` writes it, running args in rootfs (read-only), without a
// terminal, in its own namespaces (the host's network), every device
// denied unless a CDI device allows it.
func Base(rootfs string, args []string) *oci.Spec {
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	return &oci.Spec{
		Version: oci.Version,
		Process: &oci.Process{
			Args: args,
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  "/",
			Capabilities: &oci.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []oci.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     &oci.Root{Path: rootfs, Readonly: true},
		Hostname: "gpucheck",
		Mounts: []oci.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		},
		Linux: &oci.Linux{
			Resources: &oci.LinuxResources{Devices: []oci.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			Namespaces: []oci.LinuxNamespace{
				{Type: oci.PIDNamespace}, {Type: oci.IPCNamespace}, {Type: oci.UTSNamespace}, {Type: oci.MountNamespace},
			},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}
