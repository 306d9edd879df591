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
// sockets and creates its own anew. Both are checked every Watch.
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
	defer func() {
		p.registered.Store(false)
		if srv != nil {
			srv.Stop()
			p.removeSocket(own)
		}
	}()
	registrations := 0
	for {
		if srv == nil || identOf(p.socketPath()) != own {
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
		now := identOf(filepath.Join(p.Dir, KubeletSocket))
		if now != (ident{}) && now != kubelet {
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
