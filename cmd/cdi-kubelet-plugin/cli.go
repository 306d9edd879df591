package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/cdi-exec/plugins/internal/buildinfo"
	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/internal/kubelet/dra"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// env is the process state the command runs against.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

const usageText = `Usage: cdi-kubelet-plugin device-plugin [flags]
       cdi-kubelet-plugin dra --node-name NODE [flags]

Serves every resource type configured for the CDI exec plugins (or only the
--type given) to the kubelet: in the device-plugin mode as the device-plugin
resource <prefix>/<type>, in the dra mode as the DRA driver <type>.<suffix>
("cdi-kubelet-plugin dra --help" lists its flags).
Environment: CDI_PATH (plugins), CDI_STATE_DIR, CDI_HOST_ROOT (passed on to
the plugins), CDI_CONF_DIR (default of --conf-dir).

Flags of the device-plugin mode:
`

func run(ctx context.Context, args []string, e env) int {
	if buildinfo.PrintIfAsked(args, e.stdout, "cdi-kubelet-plugin", protocol.SupportedVersions()) {
		return exitOK
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		out := e.stdout
		if len(args) == 0 {
			out = e.stderr
		}
		fs, _, _ := flags(e)
		fs.SetOutput(out)
		fmt.Fprint(out, usageText)
		printDefaults(fs)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "dra":
		return runDRA(ctx, args[1:], e)
	case "device-plugin":
	default:
		fmt.Fprintf(e.stderr, "cdi-kubelet-plugin: unknown mode %q; the modes are device-plugin and dra\n", args[0])
		return exitUsage
	}
	fs, opt, obs := flags(e)
	if code, ok := parseMode(e, fs, "device-plugin", usageText, args[1:], func() error { return validate(opt, obs) }); !ok {
		return code
	}
	var err error
	if opt.Log, err = obs.logger(e.stderr); err != nil {
		fmt.Fprintf(e.stderr, "cdi-kubelet-plugin device-plugin: %v\n", err)
		return exitFailed
	}
	defer klog.Flush()
	opt.Metrics = metrics.New()
	opt.Caller.Observer = runLog{opt.Metrics, opt.Log}
	opt.Caller = opt.Caller.WithNegotiatedVersions()
	b, err := deviceplugin.New(*opt)
	if err != nil {
		opt.Log.Error("cannot start", "err", err)
		return exitFailed
	}
	lock, err := lockDevicePlugin(ctx, e, b, opt.Prefix)
	if err != nil {
		opt.Log.Error("cannot start", "err", err)
		return exitFailed
	}
	defer lock.Release()
	stop, err := obs.serve(ctx, opt.Log, opt.Metrics, b.Checks())
	if err != nil {
		opt.Log.Error("cannot start", "err", err)
		return exitFailed
	}
	defer stop()
	if err := b.Run(ctx); err != nil {
		opt.Log.Error("stopped", "err", err)
		return exitFailed
	}
	opt.Log.Info("stopped")
	return exitOK
}

// flags defines the device-plugin mode's flags over the options.
func flags(e env) (*flag.FlagSet, *deviceplugin.Options, *observability) {
	penv, _ := protocol.ReadEnv(e.getenv) // a bad CDI_LOCK_TIMEOUT is the plugins' to report
	opt := &deviceplugin.Options{}
	obs := &observability{}
	fs := newFlagSet(e, penv, "cdi-kubelet-plugin device-plugin", &opt.Caller, &opt.ConfDir, &opt.Types, &opt.CDISpecDir, obs)
	fs.StringVar(&opt.Prefix, "resource-prefix", deviceplugin.DefaultPrefix, "resources are named `PREFIX`/<type>")
	fs.StringVar(&opt.KubeletDir, "kubelet-dir", deviceplugin.DefaultKubeletDir, "the kubelet's root `DIR` (device-plugins/, pod-resources/)")
	fs.DurationVar(&opt.Poll, "poll-interval", deviceplugin.DefaultPoll, "how often the plugins' DEVICES are listed")
	fs.DurationVar(&opt.GCInterval, "gc-interval", deviceplugin.DefaultGCInterval, "how often the kubelet's PodResources are scanned")
	fs.DurationVar(&opt.Grace, "gc-grace", deviceplugin.DefaultGrace, "how long an allocation must be absent (and unallocated) before it is freed")
	fs.StringVar(&opt.ClaimStateDir, "claim-state-dir", dra.DefaultClaimStateDir, "the DRA mode's claim records (its --state-dir): claims it prepared of a type that moved to this mode are freed once no pod uses them; empty: none")
	return fs, opt, obs
}

// newFlagSet makes a mode's flag set with the flags both modes take: the
// plugins' configs, the types served, the CDI spec directory, the bound
// on one plugin run, the metrics address and the logging flags. The
// caller finds the plugins on penv's CDI_PATH, and its CDI_CONF_DIR is the
// default of --conf-dir.
func newFlagSet(e env, penv protocol.Env, name string, c *caller.Caller, confDir *string, types *[]string, specDir *string, obs *observability) *flag.FlagSet {
	c.Path = penv.Path
	// Every ADD says who makes it, so that cdictl gc leaves what the
	// Kubernetes modes hold alone (docs/protocol.md#extension-owners).
	c.Env = append(c.Env, protocol.EnvRequestOwner+"="+protocol.OwnerKubernetes)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.StringVar(confDir, "conf-dir", penv.ConfDir, "plugin configs, `DIR`/<type>.d/*.conf")
	fs.Func("type", "serve only resource type `T` (repeatable; default: every configured type)", func(s string) error {
		*types = append(*types, s)
		return nil
	})
	fs.StringVar(specDir, "cdi-spec-dir", cdispec.DefaultDir, "CDI spec `DIR` for configs without a cdi_spec arg")
	fs.DurationVar(&c.Timeout, "plugin-timeout", 30*time.Second, "bound on one plugin run")
	obs.addFlags(fs)
	return fs
}

// positive refuses a duration flag, named by the key, that is not above
// zero.
func positive(flags map[string]time.Duration) error {
	for name, d := range flags {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, got %v", name, d)
		}
	}
	return nil
}

// validate checks the flags' values.
func validate(opt *deviceplugin.Options, obs *observability) error {
	if err := obs.validate(); err != nil {
		return err
	}
	if err := positive(map[string]time.Duration{
		"--poll-interval": opt.Poll, "--gc-interval": opt.GCInterval, "--plugin-timeout": opt.Caller.Timeout,
	}); err != nil {
		return err
	}
	if opt.Grace < 0 {
		return fmt.Errorf("--gc-grace must not be negative, got %v", opt.Grace)
	}
	if strings.Contains(opt.Prefix, "/") {
		return fmt.Errorf("--resource-prefix %q must not contain /", opt.Prefix)
	}
	return nil
}

// parseMode parses a mode's flags: help that was asked for goes to stdout
// and exits 0; a parse error, a stray argument or a value validate refuses
// exits with the usage status. ok is false when the mode must not run.
func parseMode(e env, fs *flag.FlagSet, mode, usage string, args []string, validate func() error) (code int, ok bool) {
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); printDefaults(fs) }
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(e.stdout)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "cdi-kubelet-plugin %s: unexpected argument %q\n", mode, fs.Arg(0))
		return exitUsage, false
	}
	if err := validate(); err != nil {
		fmt.Fprintf(e.stderr, "cdi-kubelet-plugin %s: %v\n", mode, err)
		return exitUsage, false
	}
	return exitOK, true
}
