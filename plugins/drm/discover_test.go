package main

import (
	"fmt"
	"testing"

	"github.com/cdi-exec/plugins/pkg/sysfs"
	"github.com/cdi-exec/plugins/test/fixture"
)

func benchHost(b *testing.B, count int) *sysfs.Host {
	var h fixture.Host
	for i := range count {
		h.GPUs = append(h.GPUs, fixture.GPU{
			Addr: fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32), Vendor: "0x10de", Device: "0x2330",
			NUMA: fixture.Int(i % 4), Driver: "nvidia", Card: i, Render: 128 + i, Control: -1,
		})
	}
	root := b.TempDir()
	if err := h.Build(root); err != nil {
		b.Fatal(err)
	}
	return sysfs.NewHost(root)
}

// BenchmarkScan is discovery on a cache miss: every device read from the
// host.
func BenchmarkScan(b *testing.B) {
	for _, n := range []int{8, 256} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			root := benchHost(b, n).Root
			for b.Loop() {
				facts, err := scan(sysfs.NewHost(root), false)
				if err != nil || len(facts) != n {
					b.Fatal(err, len(facts))
				}
			}
		})
	}
}

// BenchmarkCount is INFO's work on a cache hit: decoding the cached facts
// and judging them.
func BenchmarkCount(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			facts, err := scan(benchHost(b, n), true)
			if err != nil {
				b.Fatal(err)
			}
			enc := encodeFacts(facts, true)
			f, _, _ := args{}.validate()
			for b.Loop() {
				if got, err := count(enc, f); err != nil || got != n {
					b.Fatal(got, err)
				}
			}
		})
	}
}
