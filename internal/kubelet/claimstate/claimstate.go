// Package claimstate records the ResourceClaims a DRA driver of
// cdi-kubelet-plugin has prepared: one small JSON file per driver in the
// driver's own state directory, apart from the plugins' stores.
//
// A claim's UID is the request-id of its allocation in the plugins, so the
// file is also the list of request-ids the DRA mode made: the stale-claim
// collector frees only ids listed here. Each record keeps the claim's
// namespace and name beside its UID, because NodeUnprepareResources and
// the collector must work when the claim is gone.
//
// Every change is read, changed and written under an exclusive lock on
// <driver>.lock, and the file is replaced atomically (write, fsync,
// rename), so two processes of the driver (a rolling update) and a crash
// at any point leave a whole file. Changes that come while another is
// being written are written together, once (a group commit), so claims
// prepared at once do not queue for one fsync each.
package claimstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	sigsjson "sigs.k8s.io/json"

	"github.com/cdi-exec/plugins/internal/atomicfile"
	"github.com/cdi-exec/plugins/internal/filelock"
)

// version is the file format's version.
const version = 1

// Claim is one claim the driver has prepared, or is preparing.
type Claim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Keys are the device keys the plugins were asked for, in the
	// allocation's order.
	Keys []string `json:"keys"`
	// AdminKeys are the devices allocated with admin access: the driver
	// wrote their CDI spec itself, and no plugin holds them for the claim.
	AdminKeys []string `json:"adminKeys,omitempty"`
	// CDIDevices are the CDI device ids the preparation returned, all
	// devices together.
	CDIDevices []string `json:"cdiDevices,omitempty"`
	// Devices are each device's CDI ids, by key (of Keys and AdminKeys):
	// a prepare of a claim recorded as prepared is answered from them,
	// without running a plugin. Records written before they were kept
	// have none, and such a claim's prepare replays its ADD.
	Devices map[string][]string `json:"devices,omitempty"`
	// Shares are the claim's allocations of a shared unit offered as one
	// device with consumable capacity (KEP-5075), in the allocation's
	// order: each names how many of the unit's share slots its pinned ADD
	// took (the unit's key named that often), so that a replay names the
	// same. Records written before they were kept have none.
	Shares []Share `json:"shares,omitempty"`
	// Prepared is false from before the first ADD until the claim's
	// preparation has succeeded once.
	Prepared bool      `json:"prepared"`
	Since    time.Time `json:"since"` // when the claim was first recorded
}

// Share is one allocation of a shared unit's capacity: the scheduler's
// shareID, the unit's key, and the share slots it holds in the plugin's
// store. Which slots those are is the plugin's choice (the lowest free,
// docs/protocol.md#extension-pinned-add); DEL of the claim's UID frees
// them all.
type Share struct {
	ID    string `json:"id"`
	Key   string `json:"key"`
	Slots int    `json:"slots"`
}

// Claims are the records by UID.
type Claims map[string]Claim

// file is the JSON on disk.
type file struct {
	Version int     `json:"version"`
	Driver  string  `json:"driver"`
	Claims  []Claim `json:"claims"`
}

// File is one driver's state file.
type File struct {
	driver    string
	path      string
	lock      string // the file lock of the records
	claimLock string // the claims' own locks (LockClaims)

	writer sync.Mutex // held by the Update that writes the file
	mu     sync.Mutex // guards queue
	queue  []*change  // changes not yet written, in the order they came
}

// groupWait bounds a group of changes' wait for the file lock, which the
// other pod of a rolling update holds for the milliseconds of a write.
const groupWait = 30 * time.Second

// change is one Update's function and, once closed done, its outcome.
type change struct {
	fn   func(Claims) error
	err  error
	done chan struct{}
}

// Open returns the state file of driver in dir, creating dir (mode 0700)
// if needed. The file itself is created by the first Update.
func Open(dir, driver string) (*File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("claim state: %w", err)
	}
	return &File{
		driver:    driver,
		path:      filepath.Join(dir, driver+".json"),
		lock:      filepath.Join(dir, driver+".lock"),
		claimLock: filepath.Join(dir, driver+".claims.lock"),
	}, nil
}

// LockClaims takes the lock of each claim UID, waiting until ctx ends, and
// returns the function that releases them. A claim's lock is one byte of
// <driver>.claims.lock at an offset hashed from its UID (an fcntl(2) lock
// of the open file), so the calls of one claim take turns whether they
// run in one process or in the two pods of a rolling update, while those
// of different claims run at once; two UIDs whose hashes meet merely wait
// for each other. The bytes are taken in ascending order, so that two
// callers of overlapping sets never wait for each other in a cycle.
func (f *File) LockClaims(ctx context.Context, uids []string) (unlock func(), err error) {
	var offs []int64
	for _, uid := range uids {
		h := fnv.New32a()
		h.Write([]byte(uid))
		offs = append(offs, int64(h.Sum32()))
	}
	slices.Sort(offs)
	l, err := filelock.OpenFile(f.claimLock)
	if err != nil {
		return nil, fmt.Errorf("claim locks: %w", err)
	}
	offs = slices.Compact(offs)
	for i, off := range offs {
		if err := filelock.LockByte(ctx, l, off); err != nil {
			// The wait that gave up keeps the file open until it gets its
			// byte, so closing l would not free the bytes taken before.
			for _, taken := range offs[:i] {
				_ = filelock.UnlockByte(l, taken)
			}
			l.Close()
			return nil, fmt.Errorf("claim locks: %w", err)
		}
	}
	return func() { l.Close() }, nil
}

// Path is the state file's path.
func (f *File) Path() string { return f.path }

// Read returns the recorded claims. It takes no lock: the file is only
// ever replaced whole, by a rename, so a reader finds the old file or the
// new one; it never waits for a write, which claims prepared at once
// would otherwise queue behind.
func (f *File) Read(context.Context) (Claims, error) {
	return f.read()
}

// Update runs fn on the recorded claims under the exclusive lock and
// writes what fn leaves, if it changed anything. An error from fn
// changes nothing and is returned.
//
// Updates of one File run one write at a time. Those that come while a
// write is under way wait, and the next writer applies all of them in
// the order they came, each to what the ones before it left, and writes
// the file once for them all; an fn that fails leaves out only its own
// change. The group's wait for the file lock is bounded by groupWait, not
// by one caller's ctx, so that one cancelled call does not fail the
// changes of the others; a call waits for its change's outcome whatever
// its ctx, at most twice groupWait (the group before its own, and its
// own).
func (f *File) Update(ctx context.Context, fn func(Claims) error) error {
	c := &change{fn: fn, done: make(chan struct{})}
	f.mu.Lock()
	f.queue = append(f.queue, c)
	f.mu.Unlock()
	f.writer.Lock()
	defer f.writer.Unlock()
	select {
	case <-c.done: // the writer before took it
		return c.err
	default:
	}
	f.mu.Lock()
	group := f.queue
	f.queue = nil
	f.mu.Unlock()
	f.commit(ctx, group)
	return c.err
}

// commit applies a group of changes and writes the file once, then
// closes each change's done.
func (f *File) commit(ctx context.Context, group []*change) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupWait)
	defer cancel()
	err := f.locked(ctx, filelock.Exclusive, func() error {
		old, err := f.read()
		if err != nil {
			return err
		}
		claims := old
		for _, c := range group {
			next := maps.Clone(claims)
			if c.err = c.fn(next); c.err == nil {
				claims = next
			}
		}
		if reflect.DeepEqual(claims, old) {
			return nil
		}
		return f.write(claims)
	})
	for _, c := range group {
		if c.err == nil {
			c.err = err
		}
		close(c.done)
	}
}

// locked runs fn holding a lock of kind on the lock file.
func (f *File) locked(ctx context.Context, kind int, fn func() error) error {
	l, err := filelock.OpenFile(f.lock)
	if err != nil {
		return fmt.Errorf("claim state: %w", err)
	}
	defer l.Close()
	if err := filelock.Flock(ctx, l, kind); err != nil {
		return fmt.Errorf("claim state: %w", err)
	}
	return fn()
}

// read decodes the file; a file that does not exist holds no claims.
func (f *File) read() (Claims, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return Claims{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim state: %w", err)
	}
	var v file
	strict, err := sigsjson.UnmarshalStrict(data, &v)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil || v.Version != version || v.Driver != f.driver {
		return nil, &RefusedError{Path: f.path, Driver: f.driver, Err: err}
	}
	claims := make(Claims, len(v.Claims))
	for _, c := range v.Claims {
		claims[c.UID] = c
	}
	return claims, nil
}

// RefusedError is a state file that is not a file of this version and
// driver. It is never replaced: it may list claims some driver prepared.
type RefusedError struct {
	Path   string
	Driver string
	Err    error // why it does not decode, if it does not
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("claim state %s is not a version %d file of driver %s (%v): it lists the claims this driver prepared, so it is never replaced; move it away to start afresh", e.Path, version, e.Driver, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// write replaces the file atomically.
func (f *File) write(claims Claims) error {
	v := file{Version: version, Driver: f.driver, Claims: []Claim{}}
	for _, uid := range slices.Sorted(maps.Keys(claims)) {
		v.Claims = append(v.Claims, claims[uid])
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("claim state: %w", err)
	}
	dir, name := filepath.Dir(f.path), filepath.Base(f.path)
	if err := atomicfile.WriteBytes(dir, name, atomicfile.Options{Temp: "." + name + ".*", Perm: 0o600}, append(data, '\n')); err != nil {
		return fmt.Errorf("claim state: %w", err)
	}
	return nil
}
