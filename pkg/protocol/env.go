package protocol

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdi-exec/plugins/internal/nearmiss"
)

// Environment variables (docs/protocol.md#environment-variables).
const (
	EnvCommand   = "CDI_COMMAND"
	EnvVersion   = "CDI_VERSION"
	EnvRequest   = "CDI_REQUEST"
	EnvRequestID = "CDI_REQUEST_ID"
	EnvNUMA      = "CDI_REQUEST_NUMA_LOCALITY"
	// EnvRequestDevices names the exact devices of a pinned ADD
	// (docs/protocol.md#extension-pinned-add).
	EnvRequestDevices = "CDI_REQUEST_DEVICES"
	EnvValidIDs       = "CDI_VALID_REQUEST_IDS"
	// EnvRequestOwner names who makes an ADD's allocation, kept in its
	// record; EnvKeepOwners lists owners whose records a GC keeps
	// whatever their request-id (docs/protocol.md#extension-owners).
	// Both are optional: a plugin that does not know them ignores them.
	EnvRequestOwner = "CDI_REQUEST_OWNER"
	EnvKeepOwners   = "CDI_GC_KEEP_OWNERS"
	EnvHostRoot     = "CDI_HOST_ROOT"
	EnvStateDir     = "CDI_STATE_DIR"
	EnvPath         = "CDI_PATH"
	EnvConfDir      = "CDI_CONF_DIR"
	EnvLockTimeout  = "CDI_LOCK_TIMEOUT"
)

// knownEnv lists every CDI_* variable that a plugin or a caller of the
// suite reads, for EnvNearMisses.
var knownEnv = [...]string{
	EnvCommand, EnvVersion, EnvRequest, EnvRequestID, EnvNUMA, EnvRequestDevices, EnvValidIDs,
	EnvHostRoot, EnvStateDir, EnvPath, EnvConfDir, EnvLockTimeout,
}

// EnvNearMisses returns one warning for each variable set in environ
// (NAME=value pairs) that is probably a misspelling of one of the suite's:
// a CDI_* name that none of them has and that is within a small edit
// distance of one (nearmiss), or that mentions STATE while CDI_STATE_DIR
// is not set. The state directory is named whenever CDI_STATE_DIR is not
// set, so that a misspelt one never falls silently to the node's live
// /var/lib/cdi. Other CDI_* names are left alone: a Kubernetes service
// called "cdi" sets CDI_SERVICE_HOST and the like in every pod beside it.
func EnvNearMisses(environ []string) []string {
	var set []string
	stateSet := false
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case !strings.HasPrefix(k, "CDI_"):
		case k == EnvStateDir:
			stateSet = v != ""
		default:
			set = append(set, k)
		}
	}
	var out []string
	for _, k := range set {
		if slices.Contains(knownEnv[:], k) {
			continue
		}
		near, ok := nearmiss.Closest(k, knownEnv[:])
		if !ok && strings.Contains(k, "STATE") {
			near, ok = EnvStateDir, true
		}
		if !ok {
			continue
		}
		w := fmt.Sprintf("%s is set, but no program of the suite reads it: did you mean %s?", k, near)
		if near == EnvStateDir && !stateSet {
			w += fmt.Sprintf(" %s is not set, so the state directory is the node's own %s", EnvStateDir, DefaultStateDir)
		}
		out = append(out, w)
	}
	return out
}

// Defaults of the shared environment variables.
const (
	DefaultHostRoot    = "/"
	DefaultStateDir    = "/var/lib/cdi"
	DefaultPath        = "/opt/cdi/bin"
	DefaultConfDir     = "/etc/cdi"
	DefaultLockTimeout = 10 * time.Second
)

// OwnerKubernetes is the CDI_REQUEST_OWNER of the Kubernetes modes
// (cdi-kubelet-plugin's DRA and device-plugin modes).
const OwnerKubernetes = "kubernetes"

// NoValidIDs is the CDI_VALID_REQUEST_IDS value that keeps nothing. An
// empty variable is refused instead, so that a missing list never wipes a
// node (docs/protocol.md#extension-gc).
const NoValidIDs = "none"

// Env holds the suite-wide settings of the environment, defaults applied.
type Env struct {
	HostRoot    string        // CDI_HOST_ROOT
	StateDir    string        // CDI_STATE_DIR
	Path        string        // CDI_PATH
	ConfDir     string        // CDI_CONF_DIR
	LockTimeout time.Duration // CDI_LOCK_TIMEOUT
}

// ReadEnv reads the shared variables through getenv. A variable that is set
// but empty counts as unset. An invalid CDI_LOCK_TIMEOUT leaves the default
// in place and is returned as the error, for the caller to warn about.
func ReadEnv(getenv func(string) string) (Env, error) {
	get := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	e := Env{
		HostRoot:    get(EnvHostRoot, DefaultHostRoot),
		StateDir:    get(EnvStateDir, DefaultStateDir),
		Path:        get(EnvPath, DefaultPath),
		ConfDir:     get(EnvConfDir, DefaultConfDir),
		LockTimeout: DefaultLockTimeout,
	}
	v := getenv(EnvLockTimeout)
	if v == "" {
		return e, nil
	}
	t, err := ParseTimeout(v)
	if err != nil {
		return e, fmt.Errorf("ignoring %s: %w; waiting at most %v", EnvLockTimeout, err, DefaultLockTimeout)
	}
	e.LockTimeout = t
	return e, nil
}

// CheckRoots refuses a relative host root (code 101, the node's
// configuration) or state directory (code 106, the store is unavailable):
// a plugin's working directory is whatever its caller's was, so a relative
// path would silently point somewhere else
// (docs/protocol.md#environment-variables).
func (e Env) CheckRoots() error {
	if !filepath.IsAbs(e.HostRoot) {
		return Errorf(CodeInvalidConfig, "%s %q is not an absolute path", EnvHostRoot, e.HostRoot)
	}
	if !filepath.IsAbs(e.StateDir) {
		return Errorf(CodeStore, "%s %q is not an absolute path", EnvStateDir, e.StateDir)
	}
	return nil
}

// HostRootProblem says why the host root is probably not a host's root: it
// has no sys/class or no dev, so no device can be found under it and every
// capacity is 0. It returns nil for a root with both. Callers warn with it
// (it is no error: a host may have no devices), and plugins only when they
// found nothing, so that the usual call pays no extra system call.
func (e Env) HostRootProblem() error {
	for _, dir := range []string{"sys/class", "dev"} {
		p := filepath.Join(e.HostRoot, dir)
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s %s has no %s directory (%s): no device can be found under it; is it the host's root?", EnvHostRoot, e.HostRoot, dir, p)
		}
	}
	return nil
}

// ParseTimeout parses a duration given either in Go syntax ("1.5s",
// "500ms") or as plain seconds ("10"). Anything that is not a duration from
// 1ns to 24h once parsed is an error: NaN, infinities, zero, negative
// values, and values so small that they round to zero (1e-10).
func ParseTimeout(s string) (time.Duration, error) {
	var t time.Duration
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if !(n > 0 && n <= maxTimeout.Seconds()) { // false for NaN too
			return 0, fmt.Errorf("%q is not between 1ns and %v", s, maxTimeout)
		}
		t = time.Duration(n * float64(time.Second))
	} else if t, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	if t <= 0 || t > maxTimeout {
		return 0, fmt.Errorf("%q is not between 1ns and %v", s, maxTimeout)
	}
	return t, nil
}

// maxTimeout bounds what ParseTimeout accepts.
const maxTimeout = 24 * time.Hour
