#!/usr/bin/env bash
# realnode.sh runs a real Kubernetes node on this machine — kubelet, containerd, runc, CNI bridge,
# kube-proxy and CoreDNS, with the control plane beside them — in namespaces of its own, so that
# the project's images can be installed by its chart and tested as on a cluster (docs/realnode.md).
#
#   hack/realnode/realnode.sh up        start the node and the control plane; print the kubeconfig's path
#   hack/realnode/realnode.sh images    build the project's images (the Dockerfile's stages) and import them
#   hack/realnode/realnode.sh install   CoreDNS, then `helm install` of charts/agentrun with the local images
#   hack/realnode/realnode.sh down      stop everything and remove every trace; verify the host is untouched
#   hack/realnode/realnode.sh status    say whether a node is up
#   hack/realnode/realnode.sh exec CMD  run CMD inside the node's namespaces (e.g. ctr, or cat /proc/PID/status)
#
# Everything runs in one pid, mount and network namespace, held by a pause process:
#   - network: the node's IP on a veth whose peer stays in the namespace too (no route out), nothing on the host's network
#     but one listening port (127.0.0.1:$REALNODE_API_PORT, forwarded by `realnode proxy` to the API
#     server inside); iptables rules (kube-proxy's) live in the namespace and die with it;
#   - mount: /run, /var/log, /var/lib and the three global sysctls the kubelet sets are shadowed inside it;
#     kubelet, containerd and etcd keep their data under $REALNODE_STATE;
#   - pid: killing the holder kills every process of the node, containers included.
# `down` removes the cgroups the node's containers made, and $REALNODE_STATE.
#
# Needs root. Debian's containerd, runc, containernetworking-plugins, iptables and conntrack are
# installed with apt when missing; kubelet, kube-scheduler, kube-proxy and coredns come from
# hack/envtest-toolchain.sh (WITH_NODE=1), built from their Go modules.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${REALNODE_STATE:-/var/tmp/agentrun-realnode}"
API_PORT="${REALNODE_API_PORT:-16443}"
NODE_NAME=realnode
NODE_IP=10.250.0.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_IP=10.96.0.10
TAG="${REALNODE_TAG:-dev}"
SOCK=/run/containerd/containerd.sock
SYSCTLS=(vm/overcommit_memory kernel/panic kernel/panic_on_oops)
# Host paths a node's components make by default; the node's own must not appear (verify_clean).
HOST_PATHS=(/opt/containerd /run/containerd /run/netns /run/mount /var/lib/containerd /var/lib/kubelet
	/var/lib/cni /etc/cni /var/log/pods /var/log/containers)

log() { printf '[realnode] %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

holder_pid() { [[ -s "$STATE/holder.pid" ]] && cat "$STATE/holder.pid"; }
# in_node runs a command inside the node's namespaces.
in_node() { nsenter --target "$(cat "$STATE/init.pid")" --mount --net --pid --wd=/ -- "$@"; }
# start runs a long-lived component of the node in the background, its output in $STATE/logs.
start() {
	local name="$1"
	shift
	log "starting $name"
	setsid nohup nsenter --target "$(cat "$STATE/init.pid")" --mount --net --pid --wd=/ -- "$@" \
		>"$STATE/logs/$name.log" 2>&1 </dev/null &
}
kc() { "$BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

# wait_for polls a command until it succeeds, for at most $2 seconds.
wait_for() {
	local what="$1" limit="$2"
	shift 2
	local start=$SECONDS
	until "$@" >/dev/null 2>&1; do
		((SECONDS - start < limit)) || die "$what not ready after ${limit}s (logs: $STATE/logs)"
		sleep 0.2
	done
	log "$what ready after $((SECONDS - start))s"
}

ensure_packages() {
	local missing=()
	command -v containerd >/dev/null || missing+=(containerd)
	command -v runc >/dev/null || missing+=(runc)
	[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v conntrack >/dev/null || missing+=(conntrack)
	command -v openssl >/dev/null || missing+=(openssl)
	((${#missing[@]} == 0)) && return
	log "installing ${missing[*]} with apt"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

toolchain() {
	BIN="$(WITH_NODE=1 WITH_CONTROLLER_MANAGER=1 "$ROOT/hack/envtest-toolchain.sh")"
}

# ca NAME makes a self-signed CA, NAME.crt and NAME.key, in the current directory.
ca() {
	openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
	openssl req -x509 -new -key "$1.key" -subj "/CN=$1" -days 2 -out "$1.crt" 2>/dev/null
}

# cert NAME CN O SANS [CA] signs NAME.crt (key NAME.key) with CA.crt (default ca.crt) in the current
# directory: a client certificate when SANS is empty, else a serving one for SANS.
cert() {
	local signer="${5:-ca}" ext="extendedKeyUsage=clientAuth"
	[[ -z "${4:-}" ]] || ext="extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$4"
	openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
	openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr" 2>/dev/null
	openssl x509 -req -in "$1.csr" -CA "$signer.crt" -CAkey "$signer.key" -CAcreateserial -days 2 \
		-extfile <(printf '%s\n' "$ext") -out "$1.crt" 2>/dev/null
}

# pki makes a CA, the API server's serving certificate, the service-account key and one client
# certificate for each component (CN = user, O = group).
pki() {
	local d="$STATE/pki"
	mkdir -p "$d"
	(
		cd "$d"
		ca ca
		openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
		openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
		cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:127.0.0.1,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
		cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
		cert admin realnode-admin system:masters
		cert kubelet "system:node:$NODE_NAME" system:nodes
		cert controller-manager system:kube-controller-manager
		cert scheduler system:kube-scheduler
		cert proxy system:kube-proxy
	)
}

# kubeconfig NAME SERVER writes $STATE/NAME.kubeconfig for the client certificate NAME.
kubeconfig() {
	local d="$STATE/pki"
	cat >"$STATE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster: {server: "$2", certificate-authority: "$d/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$d/$1.crt", client-key: "$d/$1.key"}
contexts:
- name: realnode
  context: {cluster: realnode, user: $1}
current-context: realnode
EOF
}

configs() {
	mkdir -p "$STATE/cni" "$STATE/kubelet" "$STATE/pod-logs" "$STATE/sysctl"
	cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "/run/containerd"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/agentrun/pause:$TAG"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
EOF
	# A bridge with host-local addresses, no masquerade (nothing is reachable outside anyway).
	cat >"$STATE/cni/10-realnode.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "realnode", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni-ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
]}
EOF
	# Pods resolve names with the cluster DNS only; the node itself has none.
	: >"$STATE/resolv.conf"
	cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$SOCK
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
podLogsDir: $STATE/pod-logs
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
	cat >"$STATE/proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
# Every Service connection is masqueraded, so a reply between two pods on the bridge comes back
# through the node (no br_netfilter needed); conntrack's global limits are left as they are.
iptables: {masqueradeAll: true}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# setup_namespaces starts the holder and prepares the node's mount and network namespaces.
setup_namespaces() {
	setsid nohup unshare --pid --fork --kill-child --mount-proc --net --mount --propagation private \
		"$STATE/bin/pause" >/dev/null 2>&1 </dev/null &
	echo $! >"$STATE/holder.pid"
	local holder
	holder="$(cat "$STATE/holder.pid")"
	wait_for "namespace holder" 10 pgrep -P "$holder"
	pgrep -P "$holder" >"$STATE/init.pid"
	in_node bash -euc "
		mount -n -t tmpfs tmpfs /run
		mkdir -p /run/netns /run/containerd
		mount -n -t tmpfs tmpfs /var/log
		mount -n -t tmpfs tmpfs /var/lib
		for s in ${SYSCTLS[*]}; do
			f=\"$STATE/sysctl/\${s//\//.}\"
			cat \"/proc/sys/\$s\" >\"\$f\"
			mount --bind \"\$f\" \"/proc/sys/\$s\"
		done
		ip link set lo up
		ip link add eth0 type veth peer name eth0-peer
		ip addr add $NODE_IP/24 dev eth0
		ip link set eth0-peer up
		ip link set eth0 up
		ip route add default dev eth0
	"
}

up() {
	[[ $EUID -eq 0 ]] || die "run as root"
	if [[ -n "$(holder_pid)" ]]; then
		[[ ! -e "/proc/$(holder_pid)" ]] || die "a node is up already ($STATE); run '$0 down' first"
		log "the node of $STATE is gone; cleaning up after it"
		down
	fi
	ensure_packages
	toolchain
	local t0=$SECONDS
	rm -rf "$STATE"
	mkdir -p "$STATE/logs" "$STATE/bin" "$STATE/images"
	trap 'log "up failed; tearing down"; down' ERR
	find /sys/fs/cgroup -mindepth 2 -type d 2>/dev/null | sort >"$STATE/cgroups.before"
	ls -d "${HOST_PATHS[@]}" >"$STATE/paths.before" 2>/dev/null || true
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$STATE/bin/pause" ./hack/realnode/pause &&
		go build -o "$STATE/bin/realnode" ./hack/realnode)
	pki
	configs
	kubeconfig admin "https://127.0.0.1:$API_PORT"
	mv "$STATE/admin.kubeconfig" "$STATE/kubeconfig"
	local inside="https://$NODE_IP:6443"
	for c in kubelet controller-manager scheduler proxy; do kubeconfig "$c" "$inside"; done
	setup_namespaces
	setsid nohup "$STATE/bin/realnode" proxy -netns "/proc/$(cat "$STATE/init.pid")/ns/net" \
		-listen "127.0.0.1:$API_PORT" -to "$NODE_IP:6443" >"$STATE/logs/proxy.log" 2>&1 </dev/null &
	echo $! >"$STATE/proxy.pid"

	local p="$STATE/pki"
	start etcd "$BIN/etcd" --data-dir "$STATE/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 --unsafe-no-fsync
	start containerd containerd --config "$STATE/containerd.toml"
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--advertise-address "$NODE_IP" --secure-port 6443 --service-cluster-ip-range "$SERVICE_CIDR" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged \
		--kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$p/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP,Hostname
	wait_for "kube-apiserver" 60 kc get --raw /readyz
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$STATE/controller-manager.kubeconfig" \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--use-service-account-credentials --leader-elect=false --cluster-cidr "$POD_CIDR" \
		--cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key"
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$STATE/scheduler.kubeconfig" --leader-elect=false
	wait_for "containerd" 30 in_node ctr --address "$SOCK" version
	images_pause
	start kubelet "$BIN/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
		--root-dir "$STATE/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
	start kube-proxy "$BIN/kube-proxy" --config "$STATE/proxy.yaml"
	wait_for "node $NODE_NAME" 60 kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
	log "node Ready $((SECONDS - t0))s after start"
	trap - ERR
	echo "$STATE/kubeconfig"
}

# image_import NAME builds nothing: it imports $STATE/images/NAME.tar into the node's containerd.
image_import() {
	in_node ctr --address "$SOCK" -n k8s.io images import --no-unpack=false "$STATE/images/$1.tar" >&2
}

images_pause() {
	"$STATE/bin/realnode" image -base scratch -copy "/pause=$STATE/bin/pause" -entrypoint /pause \
		-name "localhost/agentrun/pause:$TAG" -o "$STATE/images/pause.tar"
	image_import pause
}

# images builds the project's images from the Dockerfile's stages (realnode image), and CoreDNS's
# from the toolchain's binary, and imports them into the node.
images() {
	[[ -n "$(holder_pid)" ]] || die "no node is up; run '$0 up' first"
	toolchain
	local t0=$SECONDS
	"$STATE/bin/realnode" image -dockerfile "$ROOT/Dockerfile" -target manager \
		-name "localhost/agentrun/agentrun:$TAG" -o "$STATE/images/agentrun.tar"
	"$STATE/bin/realnode" image -dockerfile "$ROOT/Dockerfile" -target research-agent \
		-name "localhost/agentrun/research-agent:$TAG" -o "$STATE/images/research-agent.tar"
	"$STATE/bin/realnode" image -base nonroot -user 65532:65532 -copy "/coredns=$BIN/coredns" \
		-entrypoint /coredns -name "localhost/agentrun/coredns:$TAG" -o "$STATE/images/coredns.tar"
	for i in agentrun research-agent coredns; do image_import "$i"; done
	log "images built and imported in $((SECONDS - t0))s"
}

# install_certs makes the Secrets cert-manager would issue for the chart (certManager.enabled=false),
# in cert-manager's form (tls.crt, tls.key, ca.crt). A STOPGAP until the operator manages its own
# certificates (issue 33 item 3); the webhooks' caBundle is patched in after the install.
install_certs() {
	local ns="$1" p="$2" d="$STATE/pki/chart"
	mkdir -p "$d"
	(
		cd "$d"
		ca webhook-ca
		ca gateway-ca
		ca stream-ca
		svc() { echo "DNS:$p$1.$ns.svc,DNS:$p$1.$ns.svc.cluster.local"; }
		cert webhook-server-cert "${p}webhook-service" "" "$(svc webhook-service)" webhook-ca
		cert gateway-server-cert "${p}gateway" "" "$(svc gateway)" gateway-ca
		cert gateway-metrics-server-cert "${p}gateway-metrics" "" "$(svc gateway-metrics)" gateway-ca
		cert stream-server-cert "${p}stream" "" "$(svc stream)" stream-ca
		cert stream-client-cert "${p}gateway" "" "" stream-ca
	)
	local pair s signer
	for pair in webhook-server-cert:webhook-ca gateway-server-cert:gateway-ca \
		gateway-metrics-server-cert:gateway-ca stream-server-cert:stream-ca stream-client-cert:stream-ca; do
		s="${pair%%:*}"
		signer="${pair#*:}"
		kc -n "$ns" create secret generic "$s" --type kubernetes.io/tls --from-file "tls.crt=$d/$s.crt" \
			--from-file "tls.key=$d/$s.key" --from-file "ca.crt=$d/$signer.crt" --dry-run=client -o yaml |
			kc apply -f - >&2
	done
}

# install deploys CoreDNS and installs charts/agentrun the way a user does, with the local images.
install() {
	[[ -n "$(holder_pid)" ]] || die "no node is up; run '$0 up' first"
	toolchain
	local t0=$SECONDS ns=agentrun-system p=agentrun- helm
	helm="$("$ROOT/hack/helm.sh")"
	sed -e "s/:TAG\$/:$TAG/" -e "s/DNS_IP/$DNS_IP/" "$ROOT/hack/realnode/coredns.yaml" | kc apply -f - >&2
	# The stream's volume: a hostPath PersistentVolume for its claim (the node has no provisioner).
	mkdir -p "$STATE/volumes/stream"
	chmod 0777 "$STATE/volumes/stream"
	sed "s|STREAM_PATH|$STATE/volumes/stream|" "$ROOT/hack/realnode/stream-volume.yaml" | kc apply -f - >&2
	kc create namespace "$ns" --dry-run=client -o yaml | kc apply -f - >&2
	install_certs "$ns" "$p"
	# shellcheck disable=SC2086 # REALNODE_HELM_ARGS is a list of flags
	"$helm" --kubeconfig "$STATE/kubeconfig" upgrade --install agentrun "$ROOT/charts/agentrun" --namespace "$ns" \
		--set image.repository=localhost/agentrun/agentrun --set "image.tag=$TAG" --set image.pullPolicy=Never \
		--set certManager.enabled=false ${REALNODE_HELM_ARGS:-} >&2
	local bundle w
	bundle="$(base64 -w0 <"$STATE/pki/chart/webhook-ca.crt")"
	for w in "mutatingwebhookconfiguration/${p}mutating-webhook-configuration" \
		"validatingwebhookconfiguration/${p}validating-webhook-configuration"; do
		kc get "$w" -o json | sed "s|\"service\": {|\"caBundle\": \"$bundle\", \"service\": {|g" | kc replace -f - >&2
	done
	kc -n kube-system rollout status deploy/coredns --timeout=120s >&2
	local r
	for r in "deploy/${p}controller-manager" "daemonset/${p}gateway" "statefulset/${p}stream" "deploy/${p}tools"; do
		kc -n "$ns" rollout status "$r" --timeout=180s >&2
	done
	log "installed in $((SECONDS - t0))s"
}

# down stops the node and removes what it made; it then checks that nothing is left.
down() {
	local holder
	holder="$(holder_pid || true)"
	if [[ -s "$STATE/proxy.pid" ]]; then kill "$(cat "$STATE/proxy.pid")" 2>/dev/null || true; fi
	if [[ -n "$holder" ]]; then
		log "stopping the node (holder $holder)"
		# The namespace's first process: when it dies the kernel kills every process of the node,
		# containers included. (unshare itself ignores SIGTERM while it waits.)
		[[ ! -s "$STATE/init.pid" ]] || kill -KILL "$(cat "$STATE/init.pid")" 2>/dev/null || true
		local i
		for i in $(seq 100); do
			[[ -e "/proc/$holder" ]] || break
			sleep 0.1
		done
	fi
	# The containers' cgroups: every cgroup made since up, deepest first.
	if [[ -s "$STATE/cgroups.before" ]]; then
		local d
		find /sys/fs/cgroup -mindepth 2 -type d 2>/dev/null | sort | comm -13 "$STATE/cgroups.before" - |
			sort -r | while read -r d; do rmdir "$d" 2>/dev/null || log "cgroup $d not removed"; done
	fi
	local before=""
	[[ ! -f "$STATE/paths.before" ]] || before="$(cat "$STATE/paths.before")"
	[[ ! -d "$STATE" ]] || rm -rf "$STATE"
	verify_clean "$before"
}

# verify_clean fails when anything of a node is left on the host; $1 lists the HOST_PATHS that
# existed before the node came up.
verify_clean() {
	local left=0 path
	for path in "${HOST_PATHS[@]}"; do
		if [[ -e "$path" ]] && ! grep -qx "$path" <<<"${1:-}"; then
			log "left: $path"
			left=1
		fi
	done
	if grep -q "agentrun-realnode\|/run/containerd\|/run/netns" /proc/self/mountinfo; then
		log "left: mounts"
		left=1
	fi
	if pgrep -x containerd >/dev/null || pgrep -x kubelet >/dev/null || pgrep -f "containerd-shim" >/dev/null; then
		log "left: processes (containerd, kubelet or a shim)"
		left=1
	fi
	if [[ -n "$(iptables-save 2>/dev/null | grep -v '^#' | grep -iv '^\*\|^COMMIT\|^:' || true)" ]]; then
		log "left: iptables rules on the host"
		left=1
	fi
	if ip link show cni0 >/dev/null 2>&1 || [[ -n "$(ip netns list 2>/dev/null)" ]]; then
		log "left: network devices or namespaces"
		left=1
	fi
	((left == 0)) || die "the host is not clean"
	log "down: no mounts, processes, paths, network namespaces or iptables rules left"
}

status() {
	if [[ -n "$(holder_pid)" && -e "/proc/$(holder_pid)" ]]; then
		echo "up: $STATE/kubeconfig"
	else
		echo down
		return 1
	fi
}

case "${1:-}" in
up) up ;;
images) images ;;
install) install ;;
exec)
	shift
	[[ -n "$(holder_pid)" ]] || die "no node is up"
	in_node "$@"
	;;
down) down ;;
status) status ;;
*) die "usage: $0 up|images|install|down|status|exec CMD" ;;
esac
