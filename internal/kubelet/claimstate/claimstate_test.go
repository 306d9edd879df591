package claimstate

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, dir string) *File {
	t.Helper()
	f, err := Open(dir, "tty.cdi-exec.io")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestUpdateAndRead(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	got, err := f.Read(t.Context())
	if err != nil || len(got) != 0 {
		t.Fatalf("a new state: %v, %v", got, err)
	}
	c := Claim{UID: "0b2c3d4e-0000-4000-8000-000000000001", Namespace: "default", Name: "ttys",
		Keys: []string{"tty40", "tty41"}, Since: time.Unix(1700000000, 0).UTC()}
	err = f.Update(t.Context(), func(cs Claims) error {
		cs[c.UID] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = open(t, dir).Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := got[c.UID]; !ok || r.Name != "ttys" || len(r.Keys) != 2 || !r.Since.Equal(c.Since) {
		t.Fatalf("read back %+v", got)
	}
	st, err := os.Stat(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}

	// An error from fn changes nothing.
	boom := errors.New("boom")
	err = f.Update(t.Context(), func(cs Claims) error {
		delete(cs, c.UID)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	if got, _ := f.Read(t.Context()); len(got) != 1 {
		t.Fatalf("a failed update changed the state: %+v", got)
	}
}

// TestRefusesForeignFiles checks that a file that is not this driver's
// state is an error, and is left as it is.
func TestRefusesForeignFiles(t *testing.T) {
	for name, content := range map[string]string{
		"corrupt":       `{"version": 1, "driver": "tty.cdi-exec.io", "claims": [`,
		"other driver":  `{"version": 1, "driver": "gpu.cdi-exec.io", "claims": []}`,
		"other version": `{"version": 2, "driver": "tty.cdi-exec.io", "claims": []}`,
		// Decoded strictly (sigs.k8s.io/json): exact names, each once.
		"unknown member": `{"version": 1, "driver": "tty.cdi-exec.io", "claims": [], "claimz": []}`,
		"member twice":   `{"version": 1, "driver": "tty.cdi-exec.io", "driver": "tty.cdi-exec.io", "claims": []}`,
		"other case":     `{"version": 1, "Driver": "tty.cdi-exec.io", "claims": []}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := open(t, t.TempDir())
			if err := os.WriteFile(f.Path(), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Read(t.Context()); err == nil {
				t.Fatal("Read accepted it")
			}
			err := f.Update(t.Context(), func(cs Claims) error {
				cs["x"] = Claim{UID: "x"}
				return nil
			})
			if err == nil {
				t.Fatal("Update accepted it")
			}
			if data, _ := os.ReadFile(f.Path()); string(data) != content {
				t.Fatalf("the file was changed to %s", data)
			}
		})
	}
}

// TestConcurrentUpdates runs updates from many goroutines, each with its
// own lock file descriptor as separate processes would have: none is
// lost.
func TestConcurrentUpdates(t *testing.T) {
	dir := t.TempDir()
	const n = 32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := open(t, dir).Update(t.Context(), func(cs Claims) error {
				uid := fmt.Sprintf("uid-%02d", i)
				cs[uid] = Claim{UID: uid}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := open(t, dir).Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d claims recorded, want %d", len(got), n)
	}
}
