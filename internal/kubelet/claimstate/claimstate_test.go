package claimstate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/filelock"
	"github.com/cdi-exec/plugins/test/kubelettest"
	"golang.org/x/sys/unix"
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

// Updates that come while a write waits are written together, once, in
// the order they came; one that fails leaves out only its own change.
func TestUpdateGroupCommit(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	renames := kubelettest.WatchRenames(t, dir)
	// Hold the file lock, as the other pod of a rolling update would, so
	// that the first Update waits in it with the writer's turn.
	release := holdFileLock(t, f)
	add := func(uid string) func(Claims) error {
		return func(cs Claims) error {
			cs[uid] = Claim{UID: uid, Namespace: "default", Name: uid, Keys: []string{"tty" + uid}}
			return nil
		}
	}
	boom := errors.New("boom")
	errs := make(chan error, 1)
	go func() { errs <- f.Update(t.Context(), add("first")) }()
	waitQueue := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			f.mu.Lock()
			got := len(f.queue)
			f.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d updates queued, want %d", got, n)
			}
		}
	}
	// The first takes the writer's turn and waits for the lock.
	waitWriterTurn(t, f)
	waitQueue(0)
	var wg sync.WaitGroup
	results := make([]error, 6)
	for i := range results {
		wg.Add(1)
		// Queue them one by one, so that their order is known.
		go func() {
			defer wg.Done()
			uid := fmt.Sprint(i)
			fn := add(uid)
			if i == 3 {
				fn = func(cs Claims) error {
					delete(cs, "2") // undone: its update fails
					cs[uid] = Claim{UID: uid}
					return boom
				}
			}
			if i == 4 {
				fn = func(cs Claims) error {
					if _, ok := cs["2"]; !ok {
						return errors.New("an update after another does not see its change")
					}
					return add(uid)(cs)
				}
			}
			results[i] = f.Update(t.Context(), fn)
		}()
		waitQueue(i + 1)
	}
	release()
	if err := <-errs; err != nil {
		t.Fatalf("the first update: %v", err)
	}
	wg.Wait()
	for i, err := range results {
		if want := i == 3; errors.Is(err, boom) != want || (!want && err != nil) {
			t.Errorf("update %d returned %v", i, err)
		}
	}
	if got := renames.Take(filepath.Base(f.Path())); got != 2 {
		t.Errorf("%d writes of the file, want 2: the first alone, the six queued behind it together", got)
	}
	got, err := f.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0", "1", "2", "4", "5", "first"}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
		t.Errorf("recorded %v, want %v", keys, want)
	}
}

// The writer of a group whose call is cancelled while it waits for the
// file lock still writes the group: one cancelled call does not fail the
// changes of the others.
func TestUpdateGroupOutlivesCancel(t *testing.T) {
	f := open(t, t.TempDir())
	release := holdFileLock(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	errs := make(chan error, 2)
	go func() {
		errs <- f.Update(ctx, func(cs Claims) error { cs["a"] = Claim{UID: "a"}; return nil })
	}()
	waitWriterTurn(t, f)
	go func() {
		errs <- f.Update(t.Context(), func(cs Claims) error { cs["b"] = Claim{UID: "b"}; return nil })
	}()
	cancel()
	time.Sleep(20 * time.Millisecond) // the writer sees its call cancelled while it waits
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("an update failed: %v", err)
		}
	}
	got, err := f.Read(t.Context())
	if err != nil || len(got) != 2 {
		t.Fatalf("recorded %v, %v; want a and b", got, err)
	}
}

// A claim's lock keeps out every other call of that claim, from this
// process or another one (a second File of the same directory stands for
// the other pod of a rolling update), and no call of another claim.
func TestLockClaims(t *testing.T) {
	dir := t.TempDir()
	ours, theirs := open(t, dir), open(t, dir)
	unlock, err := ours.LockClaims(t.Context(), []string{"b", "a", "a"})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*File{"this process": ours, "the other pod": theirs} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		if _, err := f.LockClaims(ctx, []string{"c", "a"}); err == nil {
			t.Errorf("%s took a claim's lock while it was held", name)
		}
		cancel()
		other, err := f.LockClaims(t.Context(), []string{"c", "d"})
		if err != nil {
			t.Fatalf("%s: the locks of other claims: %v", name, err)
		}
		other()
	}
	unlock()
	again, err := theirs.LockClaims(t.Context(), []string{"a"})
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
}

// A caller that gives up on a claim's lock frees the locks of the claims
// it took before it, though its wait for the last one goes on in the
// kernel until that claim is free.
func TestLockClaimsGiveUpFreesTaken(t *testing.T) {
	dir := t.TempDir()
	// first and last by their lock bytes, which LockClaims takes in order.
	first, last := "a", "b"
	lockByte := func(uid string) uint32 { h := fnv.New32a(); h.Write([]byte(uid)); return h.Sum32() }
	if lockByte(first) > lockByte(last) {
		first, last = last, first
	}
	holder, quitter, next := open(t, dir), open(t, dir), open(t, dir)
	unlock, err := holder.LockClaims(t.Context(), []string{last})
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := quitter.LockClaims(ctx, []string{first, last}); err == nil {
		t.Fatal("took a claim's lock while it was held")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	again, err := next.LockClaims(ctx, []string{first})
	if err != nil {
		t.Fatalf("the claim the quitter took before it gave up is still locked: %v", err)
	}
	again()
}

// holdFileLock takes the records' file lock, as the other pod of a
// rolling update would, and returns the function that releases it.
func holdFileLock(t *testing.T, f *File) (release func()) {
	t.Helper()
	lock, err := filelock.OpenFile(f.lock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if ok, err := filelock.TryFlock(lock, filelock.Exclusive); !ok || err != nil {
		t.Fatalf("lock: %v, %v", ok, err)
	}
	return func() {
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
			t.Fatal(err)
		}
	}
}

// waitWriterTurn waits until an Update holds the writer's turn.
func waitWriterTurn(t *testing.T, f *File) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); f.writer.TryLock(); time.Sleep(time.Millisecond) {
		f.writer.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no update took the writer's turn")
		}
	}
}
