package modelock

import (
	"context"
	"path/filepath"
	"testing"
)

func TestLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	a, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	if ok, err := Try(a, Shared); !ok || err != nil {
		t.Fatalf("shared on a free file: %v %v", ok, err)
	}
	if ok, err := Try(b, Shared); !ok || err != nil {
		t.Fatalf("a second shared lock: %v %v", ok, err)
	}
	if ok, err := Try(b, Exclusive); ok || err != nil {
		t.Fatalf("exclusive while another open file shares it: %v %v", ok, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Wait(ctx, b, Exclusive); err == nil {
		t.Fatal("Wait with an ended context took a lock that is held")
	}
	a.Close()
	if err := Wait(t.Context(), b, Exclusive); err != nil {
		t.Fatalf("Wait after the holder closed its file: %v", err)
	}
}
