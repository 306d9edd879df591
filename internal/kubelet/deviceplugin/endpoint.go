package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdi-exec/plugins/internal/unixsock"
)

// KubeletSocket is the kubelet's registration socket in the device-plugins
// directory.
const KubeletSocket = "kubelet.sock"

// DefaultWatch is how often Run checks whether the kubelet has restarted.
const DefaultWatch = 250 * time.Millisecond

// DefaultWaitLog is how often Run says again that it is waiting for the
// kubelet: its device-plugins directory or its kubelet.sock is not there.
const DefaultWaitLog = 30 * time.Second

// registerTimeout bounds one Register call.
const registerTimeout = 5 * time.Second

// Endpoint serves one resource to the kubelet through the device-plugin
// API (v1beta1): it listens on a unix socket in the kubelet's
// device-plugins directory, registers with the kubelet, registers again
// when the kubelet restarts, and answers ListAndWatch,
// GetPreferredAllocation and Allocate from a Backend (server.go). It
// knows nothing of the exec protocol; the Backend does.
type Endpoint struct {
	Resource string // fully qualified resource name, "cdi-exec.io/tty"
	Dir      string // the kubelet's device-plugins directory
	Socket   string // this plugin's socket, a file name in Dir
	Backend  Backend
	Log      *slog.Logger
	// Watch is how often the sockets are checked for a kubelet restart;
	// zero means DefaultWatch.
	Watch time.Duration
	// OnRegister, when set, is called after every successful
	// registration; again is false for the first one.
	OnRegister func(again bool)
	// WaitLog is how often a missing kubelet is logged again while Run
	// waits for it (checking every Watch); zero means DefaultWaitLog. Now
	// is the clock it is measured with; nil means time.Now.
	WaitLog time.Duration
	Now     func() time.Time

	registered atomic.Bool // with the kubelet whose socket is there now; false once Run returns
}

// ident tells one file from another that replaced it under the same name;
// the zero ident means "no file".
type ident struct {
	ino   uint64
	ctime syscall.Timespec
}

func identOf(path string) ident {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ident{}
	}
	return ident{ino: st.Ino, ctime: st.Ctim}
}

// Run serves the resource until ctx ends, then stops and removes its
// socket. It registers as soon as the kubelet's socket is there, and again
// whenever the kubelet restarts: a starting kubelet removes the plugins'
// sockets and creates its own anew. Both are checked every Watch. While
// the kubelet's device-plugins directory or its kubelet.sock is not there,
// Run waits for it, saying so in one log line that names the path, and
// again every WaitLog.
func (p *Endpoint) Run(ctx context.Context) error {
	watch := p.Watch
	if watch <= 0 {
		watch = DefaultWatch
	}
	tick := time.NewTicker(watch)
	defer tick.Stop()
	var srv *grpc.Server
	var own, kubelet ident // what is served and what was registered with
	var failed ident       // the kubelet socket the last registration failed on
	var wait waitLog
	defer func() {
		p.registered.Store(false)
		if srv != nil {
			srv.Stop()
			p.removeSocket(own)
		}
	}()
	registrations := 0
	for {
		switch fi, err := os.Stat(p.Dir); {
		case err != nil || !fi.IsDir():
			p.waiting(&wait, "the kubelet's device-plugins directory is not there: waiting for the kubelet to make it",
				"dir", p.Dir, "expected", "a running kubelet, which makes /var/lib/kubelet/device-plugins whatever its --root-dir: --kubelet-dir is that directory's parent, as mounted into this container")
			if srv != nil {
				srv.Stop()
				srv = nil
			}
			kubelet = ident{}
		case srv == nil || identOf(p.socketPath()) != own:
			if srv != nil {
				srv.Stop()
				p.Log.Info("plugin socket removed; serving again", "resource", p.Resource)
			}
			var err error
			if srv, own, err = p.serve(); err != nil {
				return err
			}
			kubelet = ident{}
		}
		sock := filepath.Join(p.Dir, KubeletSocket)
		now := identOf(sock)
		switch {
		case srv == nil:
		case now == ident{}:
			p.waiting(&wait, "the kubelet's registration socket is not there: waiting for the kubelet to start",
				"socket", sock, "expected", "the registration socket a running kubelet serves in its device-plugins directory")
		case now != kubelet:
			wait = waitLog{}
			if err := p.register(ctx); err != nil {
				if failed != now { // once per kubelet socket, not every tick
					p.Log.Warn("registration failed; trying again", "resource", p.Resource, "err", err)
					failed = now
				}
			} else {
				kubelet = now
				p.Log.Info("registered with the kubelet", "resource", p.Resource, "socket", p.socketPath())
				if p.OnRegister != nil {
					p.OnRegister(registrations > 0)
				}
				registrations++
			}
		}
		p.registered.Store(now != (ident{}) && now == kubelet)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// waitLog remembers what Run last said it waits for, and when.
type waitLog struct {
	msg  string
	when time.Time
}

// waiting logs that Run waits for the kubelet: at once when what it waits
// for changed, else once every WaitLog.
func (p *Endpoint) waiting(w *waitLog, msg string, args ...any) {
	every, now := p.WaitLog, time.Now
	if every <= 0 {
		every = DefaultWaitLog
	}
	if p.Now != nil {
		now = p.Now
	}
	t := now()
	if w.msg == msg && t.Sub(w.when) < every {
		return
	}
	*w = waitLog{msg: msg, when: t}
	p.Log.Warn(msg, append([]any{"resource", p.Resource}, args...)...)
}

func (p *Endpoint) socketPath() string { return filepath.Join(p.Dir, p.Socket) }

// Name implements probe.Check: the resource's name.
func (p *Endpoint) Name() string { return p.Resource }

// Live implements probe.Check: the plugin's socket answers
// GetDevicePluginOptions, as the kubelet asks it.
func (p *Endpoint) Live(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.socketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("device-plugin socket: %w", err)
	}
	defer conn.Close()
	if _, err := api.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &api.Empty{}); err != nil {
		return fmt.Errorf("device-plugin socket %s: %w", p.socketPath(), err)
	}
	return nil
}

// Ready implements probe.Check: the resource is registered with the
// kubelet whose registration socket is there now.
func (p *Endpoint) Ready(context.Context) error {
	if !p.registered.Load() {
		return errors.New("not registered with the kubelet")
	}
	return nil
}

// serve listens on the plugin's socket, replacing a stale one (one nobody
// answers on: a second instance for the same resource is refused), and
// serves the DevicePlugin service on it.
func (p *Endpoint) serve() (*grpc.Server, ident, error) {
	path := p.socketPath()
	if err := unixsock.Check(path); err != nil {
		return nil, ident{}, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, ident{}, fmt.Errorf("%s: another process serves this socket", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, ident{}, fmt.Errorf("removing stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, ident{}, fmt.Errorf("listening on %s: %w", path, err)
	}
	// The socket file is removed by removeSocket, only when it is still
	// ours: a restarted kubelet may already have removed it.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	api.RegisterDevicePluginServer(srv, &server{backend: p.Backend, log: p.Log})
	go func() { _ = srv.Serve(l) }()
	return srv, identOf(path), nil
}

// removeSocket removes the plugin's socket if it is still the one served.
func (p *Endpoint) removeSocket(own ident) {
	if identOf(p.socketPath()) == own {
		_ = os.Remove(p.socketPath())
	}
}

// register tells the kubelet about the resource and its socket.
func (p *Endpoint) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.Dir, KubeletSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version:      api.Version,
		Endpoint:     p.Socket,
		ResourceName: p.Resource,
		Options:      options(),
	})
	return err
}
