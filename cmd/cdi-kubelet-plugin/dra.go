package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/internal/kubelet/dra"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

const draUsage = `Usage: cdi-kubelet-plugin dra --node-name NODE [flags]

Serves every resource type configured for the CDI exec plugins (or only the
--type given) as the Kubernetes DRA driver <type>.<suffix>: it publishes the
node's devices as ResourceSlices and prepares claims with pinned ADDs under
the claim's UID. Without --kubeconfig it uses the in-cluster config.
Environment: CDI_PATH (plugins), CDI_STATE_DIR, CDI_HOST_ROOT (passed on to
the plugins), CDI_CONF_DIR (default of --conf-dir).

Flags:
`

// apiClient is how the dra mode reaches the API server.
type apiClient struct {
	kubeconfig string // "" for the in-cluster config
	// qps and burst bound the client's requests, as client-go's limiter
	// does. The helper GETs each claim it prepares, so pods starting
	// together ask at once: client-go's defaults (5 a second, bursts of
	// 10) held the 16th of 16 claims back 1.2 s (docs/performance.md,
	// "Pod start with a claim"). The defaults are the kubelet's.
	qps   float64
	burst int
}

// The defaults of --kube-api-qps and --kube-api-burst: the kubelet's
// kubeAPIQPS and kubeAPIBurst.
const (
	defaultAPIQPS   = 50
	defaultAPIBurst = 100
)

// draFlags defines the dra mode's flags over its options; api receives
// the API client's.
func draFlags(e env, api *apiClient) (*flag.FlagSet, *dra.Options, *observability) {
	penv, _ := protocol.ReadEnv(e.getenv) // a bad CDI_LOCK_TIMEOUT is the plugins' to report
	opt := &dra.Options{PluginStateDir: penv.StateDir, HostRoot: penv.HostRoot}
	obs := &observability{}
	fs := newFlagSet(e, penv, "cdi-kubelet-plugin dra", &opt.Caller, &opt.ConfDir, &opt.Types, &opt.CDISpecDir, obs)
	fs.StringVar(&opt.NodeName, "node-name", "", "this node's `NAME` (required)")
	fs.StringVar(&api.kubeconfig, "kubeconfig", "", "kubeconfig `FILE`; default: the in-cluster config")
	fs.Float64Var(&api.qps, "kube-api-qps", defaultAPIQPS, "`QPS`: requests a second to the API server, on average")
	fs.IntVar(&api.burst, "kube-api-burst", defaultAPIBurst, "`N` requests to the API server at once, above --kube-api-qps")
	fs.StringVar(&opt.Suffix, "driver-suffix", dra.DefaultSuffix, "drivers are named <type>.`SUFFIX`; CDI kinds are SUFFIX/<type>")
	fs.StringVar(&opt.KubeletDir, "kubelet-dir", deviceplugin.DefaultKubeletDir, "the kubelet's root `DIR` (plugins/, plugins_registry/)")
	fs.StringVar(&opt.StateDir, "state-dir", dra.DefaultStateDir, "`DIR` of the drivers' records of prepared claims")
	fs.StringVar(&opt.PodUID, "pod-uid", "", "`UID` of the driver's own pod: enables rolling updates (kubelet 1.33+)")
	fs.DurationVar(&opt.Poll, "poll-interval", dra.DefaultPoll, "how often the plugins' DEVICES are listed")
	fs.DurationVar(&opt.StaleInterval, "stale-interval", dra.DefaultStaleInterval, "how often prepared claims are looked up")
	fs.DurationVar(&opt.StaleGrace, "stale-grace", dra.DefaultStaleGrace, "how long a prepared claim's ResourceClaim must be gone before it is freed")
	fs.BoolVar(&opt.ClaimStatus, "claim-status", true, "write each prepared claim's status.devices: a Ready condition and the device's key, nodes, PCI address, UUID and NUMA node (KEP-4817)")
	fs.BoolVar(&opt.DeviceMetadata, "device-metadata", true, "mount each prepared device's attributes into its containers under /var/run/kubernetes.io/dra-device-attributes/ (KEP-5304)")
	opt.TaintEffect = resourceapi.DeviceTaintEffectNoSchedule
	fs.Func("taint-effect", "`EFFECT` of the taint of unusable devices: NoSchedule (default) or NoExecute, which evicts the pods using them", func(v string) error {
		switch e := resourceapi.DeviceTaintEffect(v); e {
		case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute:
			opt.TaintEffect = e
			return nil
		}
		return fmt.Errorf("%q is neither NoSchedule nor NoExecute", v)
	})
	return fs, opt, obs
}

// runDRA runs the dra mode.
func runDRA(ctx context.Context, args []string, e env) int {
	var api apiClient
	fs, opt, obs := draFlags(e, &api)
	if code, ok := parseMode(e, fs, "dra", draUsage, args, func() error { return validateDRA(opt, obs, api) }); !ok {
		return code
	}
	var err error
	if opt.Log, err = obs.logger(e.stderr); err != nil {
		fmt.Fprintf(e.stderr, "cdi-kubelet-plugin dra: %v\n", err)
		return exitFailed
	}
	defer klog.Flush()
	if opt.Client, err = kubeClient(api); err != nil {
		opt.Log.Error("cannot reach the API server", "err", err)
		return exitFailed
	}
	opt.Metrics = metrics.New()
	opt.Caller.Observer = runLog{opt.Metrics, opt.Log}
	opt.Caller = opt.Caller.WithVersionCache()
	events, stopEvents := eventBroadcaster(ctx, opt.Client)
	defer stopEvents()
	opt.Events = events
	p, err := dra.New(*opt)
	if err != nil {
		opt.Log.Error("cannot start", "err", err)
		return exitFailed
	}
	stop, err := obs.serve(ctx, opt.Log, opt.Metrics, p.Checks())
	if err != nil {
		opt.Log.Error("cannot start", "err", err)
		return exitFailed
	}
	defer stop()
	if err := p.Run(ctx); err != nil {
		opt.Log.Error("stopped", "err", err)
		return exitFailed
	}
	opt.Log.Info("stopped")
	return exitOK
}

// validateDRA checks the flags' values.
func validateDRA(opt *dra.Options, obs *observability, api apiClient) error {
	if opt.NodeName == "" {
		return errors.New("--node-name is required")
	}
	if err := obs.validate(); err != nil {
		return err
	}
	if api.qps <= 0 || api.burst < 1 {
		return fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", api.qps, api.burst)
	}
	if err := positive(map[string]time.Duration{
		"--poll-interval": opt.Poll, "--stale-interval": opt.StaleInterval, "--plugin-timeout": opt.Caller.Timeout,
	}); err != nil {
		return err
	}
	if opt.StaleGrace < 0 {
		return fmt.Errorf("--stale-grace must not be negative, got %v", opt.StaleGrace)
	}
	if errs := validation.IsDNS1123Subdomain(opt.Suffix); len(errs) > 0 {
		return fmt.Errorf("--driver-suffix %q: %v", opt.Suffix, errs)
	}
	return nil
}

// kubeClient connects with the kubeconfig file, or from inside the
// cluster when there is none.
func kubeClient(api apiClient) (kubernetes.Interface, error) {
	cfg, err := api.config()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// config is the client's configuration.
func (api apiClient) config() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if api.kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", api.kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "cdi-kubelet-plugin"
	cfg.QPS, cfg.Burst = float32(api.qps), api.burst
	return cfg, nil
}

// eventBroadcaster records Events through the API server's
// events.k8s.io/v1 API, each sent in the background, until stop is
// called: it hands on what is queued and cancels what is still being
// sent, so an Event recorded in the moment the driver stops may be lost.
func eventBroadcaster(ctx context.Context, client kubernetes.Interface) (b events.EventBroadcaster, stop func()) {
	b = events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	_ = b.StartRecordingToSinkWithContext(ctx) // fails only when started twice
	return b, func() {
		b.Shutdown()
		cancel()
	}
}
