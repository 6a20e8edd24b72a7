/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package node is a Kubernetes node whose pods' containers run as local
// processes. It is built on virtual-kubelet (node.PodController and
// node.NodeController) with a "process provider": each container's image is
// mapped to a local binary, started with the container's command, args and
// env (downward API resolved), a pod-bound service-account token and a
// kubeconfig (env AGENTRUN_KUBECONFIG); stdout and stderr go to a log file per
// container, served to `kubectl logs` through the kubelet API on loopback; the
// exit code becomes the container's terminated state and the pod's phase;
// deleting the pod sends SIGTERM and, after the grace period, SIGKILL. A
// minimal binder assigns pending pods to the node.
//
// It is meant for the local development stack and the e2e tests, not as a
// general-purpose kubelet: no isolation, no images, no restarts, no probes.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// DefaultNodeName is the local node's name.
const DefaultNodeName = "agentrun-local"

// loopback is the node's address, every pod's IP, and where the kubelet API listens.
const loopback = "127.0.0.1"

// Config configures a local node.
type Config struct {
	// NodeName is the Node object's name (default DefaultNodeName).
	NodeName string
	// Client is the node's identity towards the API server. It creates the
	// Node, binds pods, writes pod status, requests pod-bound tokens and
	// force-deletes pods whose processes have exited.
	Client kubernetes.Interface
	// APIServerURL and CAData go into every pod's kubeconfig.
	APIServerURL string
	CAData       []byte
	// Dir holds one directory per pod: kubeconfig, token, tmp/ and a log
	// file per container (<Dir>/<namespace>_<pod>_<uid[:8]>/<container>.log).
	Dir string
	// Images maps container images to local binaries.
	Images ImageMap
	// TokenTTL is the lifetime of pod tokens (default 1h; refreshed at 80%).
	TokenTTL time.Duration
	// DisableBinder turns the binder off (when a real scheduler runs).
	DisableBinder bool
	// Log receives the node's logs.
	Log logr.Logger
	// Env is the base environment of every container before the pod's env
	// (default: PATH of this process).
	Env []string
}

// Node is a running local node.
type Node struct {
	cfg      Config
	log      logr.Logger
	provider *provider
	// KubeletPort is the loopback port of the kubelet API (kubectl logs).
	KubeletPort int

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start registers the node, starts its pod controller, kubelet API and
// binder, and returns once the node is Ready. Stop it with Stop.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Client == nil {
		return nil, errors.New("devstack node: no client")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = time.Hour
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=" + os.Getenv("PATH")}
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	n := &Node{cfg: cfg, log: cfg.Log, cancel: cancel}
	ok := false
	defer func() {
		if !ok {
			n.Stop()
		}
	}()
	ctx = vklog.WithLogger(ctx, vkslog.FromSlog(slog.New(conflictsQuiet{Handler: logr.ToSlogHandler(cfg.Log.WithName("virtual-kubelet"))})))

	// The kubelet API, for kubectl logs.
	tlsConfig, err := selfSignedTLS(cfg.NodeName)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return nil, err
	}
	n.KubeletPort = ln.Addr().(*net.TCPAddr).Port

	n.provider = newProvider(n)

	podFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	otherFactory := informers.NewSharedInformerFactory(cfg.Client, time.Minute)
	pods := podFactory.Core().V1().Pods()

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: cfg.NodeName})

	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:         cfg.Client.CoreV1(),
		PodInformer:       pods,
		EventRecorder:     recorder,
		Provider:          n.provider,
		ConfigMapInformer: otherFactory.Core().V1().ConfigMaps(),
		SecretInformer:    otherFactory.Core().V1().Secrets(),
		ServiceInformer:   otherFactory.Core().V1().Services(),
	})
	if err != nil {
		_ = ln.Close()
		broadcaster.Shutdown()
		return nil, err
	}
	nc, err := node.NewNodeController(node.NewNaiveNodeProvider(), n.nodeObject(), cfg.Client.CoreV1().Nodes(),
		node.WithNodeStatusUpdateErrorHandler(func(ctx context.Context, err error) error {
			if !apierrors.IsNotFound(err) {
				return err
			}
			// Someone deleted the Node: register it again.
			_, err = cfg.Client.CoreV1().Nodes().Create(ctx, n.nodeObject(), metav1.CreateOptions{})
			return err
		}))
	if err != nil {
		_ = ln.Close()
		broadcaster.Shutdown()
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/", api.PodHandler(api.PodHandlerConfig{
		GetContainerLogs: n.provider.GetContainerLogs,
		GetPods:          n.provider.GetPods,
		GetPodsFromKubernetes: func(context.Context) ([]*corev1.Pod, error) {
			return pods.Lister().List(labels.Everything())
		},
	}, false))
	srv := &http.Server{Handler: mux, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second}

	n.wg.Go(func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error(err, "kubelet API server")
		}
	})
	n.wg.Go(func() {
		<-ctx.Done()
		_ = srv.Close()
		broadcaster.Shutdown()
	})

	podFactory.Start(ctx.Done())
	otherFactory.Start(ctx.Done())
	n.wg.Go(func() {
		if err := pc.Run(ctx, max(2, runtime.NumCPU())); err != nil && ctx.Err() == nil {
			n.log.Error(err, "pod controller")
		}
	})
	select {
	case <-pc.Ready():
	case <-pc.Done():
		return nil, fmt.Errorf("devstack node: pod controller: %w", pc.Err())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n.wg.Go(func() {
		if err := nc.Run(ctx); err != nil && ctx.Err() == nil {
			n.log.Error(err, "node controller")
		}
	})
	select {
	case <-nc.Ready():
	case <-nc.Done():
		return nil, fmt.Errorf("devstack node: node controller: %w", nc.Err())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if !cfg.DisableBinder {
		n.wg.Go(func() { n.runBinder(ctx) })
	}
	ok = true
	n.log.Info("local node ready", "node", cfg.NodeName, "kubeletAPI", "https://"+net.JoinHostPort(loopback, strconv.Itoa(n.KubeletPort)), "dir", cfg.Dir)
	return n, nil
}

// Stop kills every container process (SIGTERM, then SIGKILL after a short
// grace), stops the controllers and waits for them.
func (n *Node) Stop() {
	if n.provider != nil {
		n.provider.killAll(5 * time.Second)
	}
	n.cancel()
	n.wg.Wait()
}

// Processes returns the pid of every container process still running,
// keyed by namespace/pod/container.
func (n *Node) Processes() map[string]int {
	return n.provider.processes()
}

// PodDir returns the directory of a pod this node has run, or "".
func (n *Node) PodDir(namespace, name string) string {
	return n.provider.podDir(namespace, name)
}

func (n *Node) nodeObject() *corev1.Node {
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.cfg.NodeName,
			Labels: map[string]string{
				"type":                   "virtual-kubelet",
				"kubernetes.io/role":     "agent",
				"kubernetes.io/hostname": n.cfg.NodeName,
				"kubernetes.io/os":       runtime.GOOS,
				"kubernetes.io/arch":     runtime.GOARCH,
				"agentrun.dev/local":     "true",
			},
		},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity,
			Allocatable: capacity,
			// Only an InternalIP: the API server reaches the kubelet API
			// (kubectl logs) at 127.0.0.1:KubeletPort.
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: loopback}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(n.KubeletPort)}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
				KubeletVersion:          "agentrun-localnode",
				ContainerRuntimeVersion: "local-process://1",
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					Message: "local process node is ready", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
			},
		},
	}
}
