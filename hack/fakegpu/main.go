// Command warden-fake-gpu-plugin is a STAND-IN for a GPU vendor's Kubernetes device plugin, for the local
// single-node cluster of `make up` and the e2e tests only: the machines that run them have no GPU.
//
// It speaks the kubelet's device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1, built from its
// Go module): it registers with the kubelet, advertises -count devices of the extended resource -resource
// (nvidia.com/gpu by default), and gives every container that is allocated k of them the device files
// <prefix><n> for each device fake-gpu-<n> (/dev/nvidia5 ...), each a bind of -device-dir/nvidia<n>:
// the host's numbers, as real plugins keep them (a pod given 2 of 8 GPUs may hold /dev/nvidia4 and
// /dev/nvidia5). The tests make those files character devices with NVIDIA's major number (195) and
// distinct minors that no driver owns, so a job's devices cgroup can allow one GPU and deny another
// (opening fails with ENXIO or EPERM); the dataplane tier passes the same files with `docker --device`.
// Without -device-dir every device is a bind of -host-device (/dev/null). Nothing here touches a GPU.
//
// With -drivers, each allocation also gets a STAND-IN NVIDIA driver (hack/fakedriver: fake libcuda,
// libnvidia-ml and nvidia-smi of a given version), the directories taken in turn, so two GPU pods run
// different driver versions as nodes do during a driver roll-out. Turns alternate between the two
// layouts GPU runtimes use: the whole directory at /usr/local/nvidia (GKE's driver installer), and each
// versioned library at /usr/lib/x86_64-linux-gnu plus nvidia-smi at /usr/bin (NVIDIA's toolkit, CDI).
//
// The kubelet removes every socket in the device-plugin directory when it starts, so the plugin watches
// its own socket and serves and registers again when it is gone. SIGTERM/SIGINT stop it cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type config struct {
	resource        string
	count           int
	pluginDir       string
	socketName      string
	hostDevice      string
	deviceDir       string   // device files nvidia<n>, one per device (else hostDevice for all)
	containerPrefix string
	drivers         []string // stand-in driver directories (lib64/, bin/), one per allocation in turn
}

// plugin serves the DevicePlugin service for one resource.
type plugin struct {
	api.UnimplementedDevicePluginServer
	cfg   config
	stop  chan struct{} // closed when the server it belongs to stops: ends ListAndWatch streams
	turns atomic.Int64  // allocations so far: which stand-in driver and layout the next one gets
}

func deviceID(i int) string { return fmt.Sprintf("fake-gpu-%d", i) }

// hostPath is the host file behind a device: -device-dir/nvidia<n>, or -host-device for all of them.
func (p *plugin) hostPath(id string) string {
	if p.cfg.deviceDir == "" {
		return p.cfg.hostDevice
	}
	return filepath.Join(p.cfg.deviceDir, "nvidia"+strings.TrimPrefix(id, "fake-gpu-"))
}

func (p *plugin) devices() []*api.Device {
	out := make([]*api.Device, p.cfg.count)
	for i := range out {
		out[i] = &api.Device{ID: deviceID(i), Health: api.Healthy}
	}
	return out
}

func (p *plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{}, nil
}

// ListAndWatch sends the (fixed) device list once and holds the stream open: fake devices never fail.
func (p *plugin) ListAndWatch(_ *api.Empty, stream grpc.ServerStreamingServer[api.ListAndWatchResponse]) error {
	if err := stream.Send(&api.ListAndWatchResponse{Devices: p.devices()}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
	case <-p.stop:
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *api.AllocateRequest) (*api.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.devices() {
		known[d.ID] = true
	}
	resp := &api.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		c := &api.ContainerAllocateResponse{Envs: map[string]string{"WARDEN_FAKE_GPUS": strings.Join(creq.DevicesIds, ",")}}
		var paths []string
		for _, id := range creq.DevicesIds {
			if !known[id] {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			// the host's number, as real plugins keep it: fake-gpu-5 is /dev/nvidia5 in any container
			path := p.cfg.containerPrefix + strings.TrimPrefix(id, "fake-gpu-")
			paths = append(paths, path)
			c.Devices = append(c.Devices, &api.DeviceSpec{ContainerPath: path, HostPath: p.hostPath(id), Permissions: "rw"})
		}
		log.Printf("allocate %v -> %v", creq.DevicesIds, paths)
		if len(p.cfg.drivers) > 0 {
			mounts, err := driverMounts(p.cfg.drivers, int(p.turns.Add(1)-1))
			if err != nil {
				return nil, err
			}
			c.Mounts = mounts
		}
		resp.ContainerResponses = append(resp.ContainerResponses, c)
	}
	return resp, nil
}

// driverMounts lays out the stand-in driver of allocation number turn (see the package comment).
func driverMounts(drivers []string, turn int) ([]*api.Mount, error) {
	dir := drivers[turn%len(drivers)]
	if turn%2 == 0 {
		log.Printf("driver %s at /usr/local/nvidia", dir)
		return []*api.Mount{{ContainerPath: "/usr/local/nvidia", HostPath: dir, ReadOnly: true}}, nil
	}
	entries, err := os.ReadDir(filepath.Join(dir, "lib64"))
	if err != nil {
		return nil, fmt.Errorf("stand-in driver %s: %w", dir, err)
	}
	var mounts []*api.Mount
	for _, e := range entries {
		if e.Type().IsRegular() { // versioned files only: the toolkit mounts no soname links
			mounts = append(mounts, &api.Mount{
				ContainerPath: "/usr/lib/x86_64-linux-gnu/" + e.Name(),
				HostPath:      filepath.Join(dir, "lib64", e.Name()),
				ReadOnly:      true,
			})
		}
	}
	mounts = append(mounts, &api.Mount{ContainerPath: "/usr/bin/nvidia-smi", HostPath: filepath.Join(dir, "bin", "nvidia-smi"), ReadOnly: true})
	log.Printf("driver %s at /usr/lib/x86_64-linux-gnu and /usr/bin (%d files)", dir, len(mounts))
	return mounts, nil
}

func (p *plugin) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}

// serve starts a gRPC server on the plugin socket; stopServing stops it and removes the socket.
func serve(cfg config) (stopServing func(), err error) {
	sock := filepath.Join(cfg.pluginDir, cfg.socketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	p := &plugin{cfg: cfg, stop: make(chan struct{})}
	api.RegisterDevicePluginServer(srv, p)
	go func() {
		if err := srv.Serve(lis); err != nil {
			log.Printf("server on %s ended: %v", sock, err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(p.stop)
			srv.Stop()
			if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
				log.Printf("remove %s: %v", sock, err)
			}
		})
	}, nil
}

func register(ctx context.Context, cfg config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.pluginDir, filepath.Base(api.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to the kubelet: %w", err)
	}
	defer func() { _ = conn.Close() }()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version:      api.Version,
		Endpoint:     cfg.socketName,
		ResourceName: cfg.resource,
		Options:      &api.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet: %w", cfg.resource, err)
	}
	return nil
}

// run serves and registers, again whenever the kubelet wiped the socket, until ctx ends.
func run(ctx context.Context, cfg config) {
	sock := filepath.Join(cfg.pluginDir, cfg.socketName)
	var stopServing func()
	defer func() {
		if stopServing != nil {
			stopServing()
		}
	}()
	registered := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if _, err := os.Stat(sock); stopServing != nil && err != nil {
			log.Printf("%s is gone (kubelet restarted?): serving and registering again", sock)
			stopServing()
			stopServing, registered = nil, false
		}
		if stopServing == nil {
			// the kubelet makes its device-plugin directory when it starts: wait for it
			if s, err := serve(cfg); err != nil {
				log.Printf("%v (retrying)", err)
			} else {
				stopServing = s
			}
		}
		if stopServing != nil && !registered {
			if err := register(ctx, cfg); err != nil {
				log.Printf("%v (retrying)", err)
			} else {
				registered = true
				log.Printf("registered %d x %s with the kubelet (socket %s)", cfg.count, cfg.resource, sock)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func main() {
	cfg := config{}
	flag.StringVar(&cfg.resource, "resource", "nvidia.com/gpu", "extended resource name to advertise")
	flag.IntVar(&cfg.count, "count", 4, "number of fake devices")
	flag.StringVar(&cfg.pluginDir, "plugin-dir", api.DevicePluginPath, "the kubelet's device-plugin directory")
	flag.StringVar(&cfg.socketName, "socket", "warden-fake-gpu.sock", "socket file name in -plugin-dir")
	flag.StringVar(&cfg.hostDevice, "host-device", "/dev/null", "host device file behind every fake device (without -device-dir)")
	flag.StringVar(&cfg.deviceDir, "device-dir", "", "directory of device files nvidia0..nvidia<count-1>, one per fake device")
	flag.StringVar(&cfg.containerPrefix, "container-prefix", "/dev/nvidia", "device path prefix in containers")
	drivers := flag.String("drivers", "", "comma-separated stand-in driver directories (lib64/, bin/) handed out in turn")
	flag.Parse()
	if *drivers != "" {
		cfg.drivers = strings.Split(*drivers, ",")
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if cfg.count < 1 || cfg.count > 64 {
		log.Fatalf("-count must be 1..64, got %d", cfg.count)
	}
	if !strings.Contains(cfg.resource, "/") {
		log.Fatalf("-resource must be a domain-qualified extended resource like nvidia.com/gpu, got %q", cfg.resource)
	}
	hosts := []string{cfg.hostDevice}
	if cfg.deviceDir != "" {
		hosts = nil
		for i := 0; i < cfg.count; i++ {
			hosts = append(hosts, filepath.Join(cfg.deviceDir, fmt.Sprintf("nvidia%d", i)))
		}
	}
	for _, h := range hosts {
		if st, err := os.Stat(h); err != nil || st.Mode()&os.ModeDevice == 0 {
			log.Fatalf("%s must be a device file (err %v)", h, err)
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	run(ctx, cfg)
	log.Print("stopped")
}
