#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for the end-to-end tests
# that need pods to run (e2e/real/). See e2e/README.md.
#
#   e2e/cluster.sh up DIR [IMAGE.tar...]   start everything, import the images, write DIR/env
#   e2e/cluster.sh status DIR              exit 0 while the API answers and the node is Ready
#   e2e/cluster.sh down DIR                stop everything, undo every host change, remove DIR
#                                          (KEEP=1 keeps DIR: logs, certificates)
#
# Processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# containerd, kubelet, kube-proxy. The Kubernetes binaries come from
# $ETCD_BIN, $KUBE_APISERVER_BIN, $KUBE_CONTROLLER_MANAGER_BIN,
# $KUBE_SCHEDULER_BIN, $KUBELET_BIN, $KUBE_PROXY_BIN; containerd, runc, the CNI
# plugins, iptables, buildah, gcc and busybox from Debian packages. If any is
# missing the script prints one line saying which and exits 3 (the test harness
# treats 3 as "skip"). It never downloads or builds Kubernetes.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

NODE_NAME=${NODE_NAME:-e2e-node}
# The pod network: the node gets the first /24 of CLUSTER_CIDR from
# kube-controller-manager, and the bridge serves exactly that /24.
CLUSTER_CIDR=10.244.0.0/16
POD_SUBNET=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1
BRIDGE=${BRIDGE:-tpe2e0}
CNI_NETWORK=taint-operator-e2e
START_TIMEOUT=${START_TIMEOUT:-120}
# Images built here by `up` (FROM scratch, never pulled).
PAUSE_IMAGE=localhost/taint-operator-e2e/pause:1.0
BUSYBOX_IMAGE=localhost/taint-operator-e2e/busybox:1.0
# Host settings the kubelet and kube-proxy change (and ip_forward, which pods
# need); `up` saves them and `down` puts them back.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory
  net.ipv4.conf.all.route_localnet net.ipv4.ip_forward)
MARKER=.taint-operator-cluster
# Directories outside DIR that containerd 1.6 (shims), libcni and libmount make
# whatever their configuration; `down` removes those `up` did not find, if empty.
# Deepest first.
HOST_DIRS=(/run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/s
  /run/containerd/fifo /run/containerd /var/lib/cni/results /var/lib/cni/networks
  /var/lib/cni /run/mount)
# Stopped in this order by `down`: the node first, the control plane last
# (kube-apiserver hangs in shutdown if etcd goes first).
PROCESSES=(kubelet kube-proxy containerd kube-scheduler kube-controller-manager kube-apiserver etcd)

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# free_port and the test PKI (pki_ca, pki_sign, pki_service_account_keys)
# shellcheck source=e2e/lib.sh
source "$SCRIPT_DIR/lib.sh"
skip() { echo "cluster: skip: $*" >&2; exit 3; }

usage() {
  cat >&2 <<EOF
usage: $0 {up DIR [IMAGE.tar...] | status DIR | down DIR}

  up DIR [IMAGE.tar...]  start a one-node cluster with its state in DIR (new or
                         empty), import each docker/OCI archive into containerd;
                         writes DIR/env (KUBECONFIG=..., source it)
  status DIR             exit 0 if the API server answers and the node is Ready
  down DIR               delete every pod, stop every process, restore the host
                         (iptables, bridge, mounts, cgroups, sysctls); remove DIR
                         unless KEEP=1

env: ETCD_BIN, KUBE_APISERVER_BIN, KUBE_CONTROLLER_MANAGER_BIN,
     KUBE_SCHEDULER_BIN, KUBELET_BIN, KUBE_PROXY_BIN (exit 3 if one is unusable),
     NODE_NAME (default e2e-node), NODE_IP (default: the address of the default
     route's interface), BRIDGE (default tpe2e0), START_TIMEOUT (s), KEEP=1
EOF
  exit 2
}

check_prerequisites() {
  local var bin tool
  for var in ETCD_BIN KUBE_APISERVER_BIN KUBE_CONTROLLER_MANAGER_BIN KUBE_SCHEDULER_BIN KUBELET_BIN KUBE_PROXY_BIN; do
    bin=${!var:-}
    [[ -n $bin ]] || skip "$var is not set (see e2e/README.md for how to get the binary)"
    [[ -f $bin && -x $bin ]] || skip "$var=$bin is not an executable file (see e2e/README.md)"
  done
  for tool in containerd ctr runc iptables ip buildah gcc kubectl openssl curl findmnt sysctl; do
    command -v "$tool" >/dev/null 2>&1 || skip "'$tool' is not in PATH (Debian packages: see e2e/README.md)"
  done
  for bin in /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap /usr/lib/cni/loopback; do
    [[ -x $bin ]] || skip "$bin is missing (Debian package containernetworking-plugins)"
  done
  [[ -x /bin/busybox ]] && file_is_static /bin/busybox || skip "/bin/busybox is not a static binary (Debian package busybox-static)"
  ((EUID == 0)) || skip "must run as root (it starts a kubelet and changes iptables)"
}

file_is_static() { ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'program interpreter'; }

pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

default_node_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  [[ -n $ip ]] || ip=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n1)
  [[ -n $ip ]] || die "cannot find a non-loopback IPv4 address; set NODE_IP"
  echo "$ip"
}

# ---------------------------------------------------------------- certificates
gen_certs() { # DIR
  local d=$1/pki
  pki_ca "$d" taint-operator-e2e-cluster-ca
  pki_sign "$d" apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$NODE_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  pki_sign "$d" kubelet-serving "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
  pki_sign "$d" admin "/O=system:masters/CN=e2e-admin" clientAuth
  # the API server's identity towards the kubelet (logs, exec)
  pki_sign "$d" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  pki_sign "$d" kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  pki_sign "$d" kube-scheduler "/CN=system:kube-scheduler" clientAuth
  pki_sign "$d" kube-proxy "/CN=system:kube-proxy" clientAuth
  # node identity without TLS bootstrap
  pki_sign "$d" kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  pki_service_account_keys "$d"
}

write_kubeconfig() { # FILE NAME (pki/NAME.crt and .key)
  local f=$1 pki=$DIR/pki
  rm -f "$f"
  kubectl config --kubeconfig="$f" set-cluster e2e --server="$APISERVER_URL" \
    --certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$f" set-credentials "$2" \
    --client-certificate="$pki/$2.crt" --client-key="$pki/$2.key" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$f" set-context e2e --cluster=e2e --user="$2" >/dev/null
  kubectl config --kubeconfig="$f" use-context e2e >/dev/null
  chmod 600 "$f"
}

# ---------------------------------------------------------------- processes
# Each runs in a session of its own (setsid: a Ctrl-C in the caller's terminal
# must not kill containerd under running containers; `down` stops them in
# order) with its output in DIR/NAME.log. In a script, a background job is not
# a process group leader, so setsid execs in place and $! is the daemon's pid.
spawn() { # NAME COMMAND...
  local name=$1
  shift
  setsid "$@" </dev/null >>"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

# The pid in DIR/NAME.pid if that process is still ours: its command line names
# DIR, so a stale pid file never makes us signal an unrelated process.
our_pid() { # NAME
  local pid
  pid=$(cat "$DIR/$1.pid" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR/"; then
    echo "$pid"
  fi
}

stop_process() { # NAME
  local pid
  pid=$(our_pid "$1")
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do pid_alive "$pid" || break; sleep 0.1; done
    if pid_alive "$pid"; then
      log "$1 (pid $pid) ignored SIGTERM for 15s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$DIR/$1.pid"
}

wait_for() { # WHAT SECONDS NAME-OF-PROCESS-THAT-MUST-LIVE COMMAND...
  local what=$1 deadline=$((SECONDS + $2)) name=$3
  shift 3
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    [[ -n $(our_pid "$name") ]] || { tail -n 20 "$DIR/$name.log" >&2; die "$name exited while waiting for $what (log: $DIR/$name.log)"; }
    sleep 0.5
  done
  tail -n 20 "$DIR/$name.log" >&2
  die "timed out after $2 s waiting for $what (log: $DIR/$name.log)"
}

kc() { kubectl --kubeconfig="$DIR/admin.kubeconfig" --request-timeout=10s "$@"; }
ctr_() { ctr --address "$DIR/containerd/containerd.sock" --namespace k8s.io "$@"; }

start_etcd() {
  free_port ETCD_PORT 127.0.0.1
  free_port ETCD_PEER_PORT 127.0.0.1
  spawn etcd "$ETCD_BIN" --name e2e --data-dir "$DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new --logger zap --log-outputs stderr
  etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
  wait_for "etcd /health" 30 etcd etcd_healthy
}

start_apiserver() {
  local pki=$DIR/pki
  free_port APISERVER_PORT "$NODE_IP"
  # On the node's own address, not loopback: pods reach it through the
  # `kubernetes` Service, whose endpoint is the advertised address.
  APISERVER_URL="https://$NODE_IP:$APISERVER_PORT"
  write_kubeconfig "$DIR/admin.kubeconfig" admin
  spawn kube-apiserver "$KUBE_APISERVER_BIN" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$pki/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allow-privileged=true --profiling=false
  apiserver_ready() { [[ $(kc get --raw=/readyz 2>/dev/null) == ok ]]; }
  wait_for "kube-apiserver /readyz" "$START_TIMEOUT" kube-apiserver apiserver_ready
}

start_controllers() {
  local pki=$DIR/pki
  write_kubeconfig "$DIR/kube-controller-manager.kubeconfig" kube-controller-manager
  write_kubeconfig "$DIR/kube-scheduler.kubeconfig" kube-scheduler
  # Every controller: node lifecycle lifts node.kubernetes.io/not-ready and
  # taint eviction evicts pods from NoExecute taints, as in a real cluster.
  spawn kube-controller-manager "$KUBE_CONTROLLER_MANAGER_BIN" \
    --kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
    --secure-port=0 --leader-elect=false --controllers='*' \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
    --service-cluster-ip-range="$SERVICE_CIDR" --profiling=false
  spawn kube-scheduler "$KUBE_SCHEDULER_BIN" \
    --kubeconfig="$DIR/kube-scheduler.kubeconfig" \
    --secure-port=0 --leader-elect=false --profiling=false
}

write_containerd_config() {
  local c=$DIR/containerd
  mkdir -p "$c" "$DIR/cni/net.d" "$DIR/cni/ipam"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
# containerd's own /opt plugin would write to /opt/containerd
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = "$c/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # We are root without CAP_SYS_RESOURCE: nothing may lower an OOM score below 0,
  # and the sandbox's default -998 would fail every pod.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
EOF
  cat >"$DIR/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

start_containerd() {
  write_containerd_config
  spawn containerd containerd --config "$DIR/containerd/config.toml"
  wait_for "containerd" 30 containerd ctr_ version
}

# Builds DIR/images/NAME.tar (a docker-archive tagged REF) from
# e2e/images/NAME/Dockerfile and the files already copied next to it, with a
# buildah store inside DIR so that nothing stays behind.
build_image() { # NAME REF
  local ctx=$DIR/images/$1 store=(--root "$DIR/buildah/root" --runroot "$DIR/buildah/run" --storage-driver vfs)
  cp "$SCRIPT_DIR/images/$1/Dockerfile" "$ctx/Dockerfile"
  buildah "${store[@]}" bud --quiet --isolation chroot --layers=false -f "$ctx/Dockerfile" -t "$2" "$ctx" >>"$DIR/images.log" 2>&1 \
    || { tail -n 20 "$DIR/images.log" >&2; die "building image $2 failed (log: $DIR/images.log)"; }
  buildah "${store[@]}" push --quiet "$2" "docker-archive:$DIR/images/$1.tar:$2" >>"$DIR/images.log" 2>&1 \
    || { tail -n 20 "$DIR/images.log" >&2; die "writing image $2 failed (log: $DIR/images.log)"; }
}

build_images() {
  mkdir -p "$DIR/images/pause" "$DIR/images/busybox"
  gcc -static -O2 -Wall -o "$DIR/images/pause/pause" "$SCRIPT_DIR/images/pause/pause.c" \
    || die "compiling e2e/images/pause/pause.c failed (gcc -static needs libc6-dev)"
  build_image pause "$PAUSE_IMAGE"
  cp /bin/busybox "$DIR/images/busybox/busybox"
  build_image busybox "$BUSYBOX_IMAGE"
  # the build store is no longer needed; vfs layers are plain directories
  rm -rf "$DIR/buildah"
}

import_image() { # TAR
  [[ -f $1 ]] || die "image archive $1 not found"
  ctr_ images import "$1" >>"$DIR/images.log" 2>&1 \
    || { tail -n 20 "$DIR/images.log" >&2; die "ctr images import $1 failed (log: $DIR/images.log)"; }
}

start_kubelet() {
  local k=$DIR/kubelet
  mkdir -p "$k/root" "$k/pod-logs"
  free_port KUBELET_PORT "$NODE_IP"
  free_port KUBELET_HEALTHZ_PORT 127.0.0.1
  write_kubeconfig "$k/kubeconfig" kubelet
  cat >"$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host has cgroup v1 (v2 only as a hybrid mount); kubelet 1.36 refuses it
# unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$DIR/containerd/containerd.sock
podLogsDir: $k/pod-logs
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization:
  mode: Webhook
# Imported images cannot be pulled back: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A test machine's disk may be fuller than a node's; don't evict for it.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
clusterDomain: cluster.local
EOF
  spawn kubelet "$KUBELET_BIN" --config="$k/config.yaml" --kubeconfig="$k/kubeconfig" \
    --root-dir="$k/root" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
}

start_kube_proxy() {
  write_kubeconfig "$DIR/kube-proxy.kubeconfig" kube-proxy
  free_port PROXY_HEALTHZ_PORT 127.0.0.1
  free_port PROXY_METRICS_PORT 127.0.0.1
  # conntrack limits and timeouts are host-wide: leave them as they are.
  # --masquerade-all: a pod reaching a Service backed by a pod on the same bridge
  # gets its reply through the host, without br_netfilter.
  spawn kube-proxy "$KUBE_PROXY_BIN" --kubeconfig="$DIR/kube-proxy.kubeconfig" \
    --hostname-override="$NODE_NAME" --proxy-mode=iptables --cluster-cidr="$CLUSTER_CIDR" \
    --masquerade-all \
    --healthz-bind-address="127.0.0.1:$PROXY_HEALTHZ_PORT" \
    --metrics-bind-address="127.0.0.1:$PROXY_METRICS_PORT" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
    --conntrack-tcp-timeout-close-wait=0
}

save_sysctls() {
  local key
  for key in "${SYSCTLS[@]}"; do
    echo "$key=$(sysctl -n "$key")"
  done >"$DIR/sysctl.saved"
}

restore_sysctls() {
  [[ -f $DIR/sysctl.saved ]] || return 0
  local line
  while IFS= read -r line; do
    [[ $(sysctl -n "${line%%=*}") == "${line#*=}" ]] || sysctl -q -w "$line" >/dev/null \
      || log "could not restore $line"
  done <"$DIR/sysctl.saved"
  rm -f "$DIR/sysctl.saved"
}

node_ready() {
  [[ $(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
# Pods can be created once the ServiceAccount controller made "default", and
# scheduled on the node once the node lifecycle controller lifted not-ready.
node_untainted() { [[ -z $(kc get node "$NODE_NAME" -o jsonpath='{.spec.taints}') ]]; }
default_sa() { kc get serviceaccount default -n default; }
# kube-proxy programmed the `kubernetes` Service
service_programmed() { iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -qF 'default/kubernetes:https'; }

# ---------------------------------------------------------------- up
on_up_exit() {
  local rc=$?
  if ((rc != 0 && rc != 3)); then
    log "up failed; tearing down, logs kept in $DIR"
    KEEP=1 teardown
  fi
}

cmd_up() {
  local image
  check_prerequisites
  for image in "$@"; do [[ -f $image ]] || die "image archive $image not found"; done
  if [[ -e $DIR && -n $(ls -A "$DIR" 2>/dev/null) ]]; then
    die "$DIR exists and is not empty; '$0 down $DIR' first or pick another DIR"
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "network interface $BRIDGE exists: another cluster runs, or one was not taken down ('$0 down DIR')"
  fi
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  touch "$DIR/$MARKER"
  NODE_IP=${NODE_IP:-$(default_node_ip)}
  local t0=$SECONDS
  trap on_up_exit EXIT

  save_sysctls
  local d
  for d in "${HOST_DIRS[@]}"; do [[ -e $d ]] || echo "$d"; done >"$DIR/host-dirs.absent"
  sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
  gen_certs "$DIR"
  build_images &
  local images_pid=$!
  start_etcd
  start_apiserver
  start_controllers
  start_containerd
  wait "$images_pid" || die "building the pause and busybox images failed (log: $DIR/images.log)"
  for image in "$DIR/images/pause.tar" "$DIR/images/busybox.tar" "$@"; do
    import_image "$image"
  done
  start_kubelet
  start_kube_proxy
  wait_for "node $NODE_NAME Ready" "$START_TIMEOUT" kubelet node_ready
  wait_for "the default ServiceAccount" "$START_TIMEOUT" kube-controller-manager default_sa
  wait_for "node.kubernetes.io/not-ready lifted from $NODE_NAME" "$START_TIMEOUT" kube-controller-manager node_untainted
  wait_for "kube-proxy rules for the kubernetes Service" "$START_TIMEOUT" kube-proxy service_programmed
  local cidr
  cidr=$(kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')
  [[ $cidr == "$POD_SUBNET" ]] || log "warning: node podCIDR is $cidr, the bridge serves $POD_SUBNET"

  cat >"$DIR/env" <<EOF
export KUBECONFIG=$DIR/admin.kubeconfig
export CLUSTER_DIR=$DIR
export NODE_NAME=$NODE_NAME
export NODE_IP=$NODE_IP
export KUBE_APISERVER_URL=$APISERVER_URL
export CONTAINERD_ADDRESS=$DIR/containerd/containerd.sock
export PAUSE_IMAGE=$PAUSE_IMAGE
export BUSYBOX_IMAGE=$BUSYBOX_IMAGE
# for \`down\` (kube-proxy --cleanup) in a shell without the variables
export KUBE_PROXY_BIN=$KUBE_PROXY_BIN
EOF
  trap - EXIT
  cat <<EOF
cluster ready in $((SECONDS - t0))s: node $NODE_NAME ($NODE_IP), API $APISERVER_URL
  images   $(ctr_ images ls -q | grep -v '^sha256:' | tr '\n' ' ')
  logs     $DIR/*.log
  env      source $DIR/env
  down     $0 down $DIR
EOF
}

# ---------------------------------------------------------------- down
# Pods first, through the kubelet: stopping a pod runs CNI DEL (veth, IPAM,
# the bridge plugin's masquerade rules) and unmounts its volumes.
delete_pods() {
  [[ -n $(our_pid kube-apiserver) && -n $(our_pid kubelet) && -n $(our_pid containerd) ]] || return 0
  kc delete daemonsets,deployments,replicasets,statefulsets,jobs --all --all-namespaces --wait=false >/dev/null 2>&1 || true
  kc delete pods --all --all-namespaces --grace-period=5 --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 90))
  while ((SECONDS < deadline)); do
    [[ -z $(kc get pods --all-namespaces -o name 2>/dev/null) ]] && return 0
    sleep 1
  done
  log "pods still present after 90 s; stopping their containers directly"
}

# Whatever the kubelet did not stop: kill the tasks and remove the sandboxes
# through containerd, so that the shims exit.
stop_containers() {
  [[ -n $(our_pid containerd) ]] || return 0
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(ctr_ containers ls -q 2>/dev/null); do
    ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    ctr_ containers delete "$id" >/dev/null 2>&1 || true
  done
}

# containerd's shims outlive it; they were started for this DIR's containerd.
stop_shims() {
  local pid
  for pid in $(pgrep -f "containerd-shim.*-address $DIR/containerd/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

unmount_all() {
  local m
  # deepest first
  for m in $(findmnt -rn -o TARGET | grep -F "$DIR/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

# The kubelet's cgroups (cgroupfs driver): kubepods/{besteffort,burstable}/pod*/...
# under each hierarchy. rmdir only removes empty ones.
remove_cgroups() {
  local root
  for root in $(findmnt -rn -t cgroup,cgroup2 -o TARGET); do
    [[ -d $root/kubepods ]] || continue
    find "$root/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    if [[ -d $root/kubepods ]]; then log "cgroup $root/kubepods is not empty; left in place"; fi
  done
}

remove_network() {
  if [[ -n ${KUBE_PROXY_BIN:-} && -x ${KUBE_PROXY_BIN:-} ]]; then
    "$KUBE_PROXY_BIN" --cleanup >>"$DIR/kube-proxy.log" 2>&1 || log "kube-proxy --cleanup failed (log: $DIR/kube-proxy.log)"
  elif iptables -w -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
    log "KUBE_PROXY_BIN is unusable; kube-proxy's iptables chains are left (run 'kube-proxy --cleanup')"
  fi
  # the bridge plugin's per-pod masquerade chains, if a pod was not torn down
  local chain
  for chain in $(iptables -w -t nat -S POSTROUTING 2>/dev/null | grep -F "name: \"$CNI_NETWORK\"" | grep -o 'CNI-[0-9a-f]*' | sort -u); do
    iptables -w -t nat -S POSTROUTING | grep -F -- "-j $chain" | sed 's/^-A/-D/' | while read -r rule; do
      # shellcheck disable=SC2086
      iptables -w -t nat $rule 2>/dev/null || true
    done
    iptables -w -t nat -F "$chain" 2>/dev/null || true
    iptables -w -t nat -X "$chain" 2>/dev/null || true
  done
  remove_kubelet_chains
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link delete "$BRIDGE" || log "could not delete interface $BRIDGE"
  fi
  # libcni's cache of results, for pods whose DEL never ran
  rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null || true
}

remove_host_dirs() {
  [[ -f $DIR/host-dirs.absent ]] || return 0
  local d
  while IFS= read -r d; do
    rmdir "$d" 2>/dev/null || true
  done <"$DIR/host-dirs.absent"
}

# The kubelet's own chains (kube-proxy --cleanup leaves them): KUBE-FIREWALL,
# which drops outside traffic to 127.0.0.0/8, and its canaries, in IPv4 and IPv6.
remove_kubelet_chains() {
  local ipt table chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null 2>&1 || continue
    for chain in INPUT OUTPUT; do
      while "$ipt" -w -t filter -D "$chain" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    for table in filter:KUBE-FIREWALL filter:KUBE-KUBELET-CANARY nat:KUBE-KUBELET-CANARY \
      mangle:KUBE-KUBELET-CANARY mangle:KUBE-IPTABLES-HINT; do
      chain=${table#*:}
      table=${table%%:*}
      "$ipt" -w -t "$table" -F "$chain" 2>/dev/null || continue
      "$ipt" -w -t "$table" -X "$chain" 2>/dev/null || log "$ipt: could not delete chain $chain in table $table"
    done
  done
}

teardown() {
  delete_pods
  stop_process kubelet
  stop_process kube-proxy
  stop_containers
  stop_process containerd
  stop_shims
  remove_network
  unmount_all
  remove_cgroups
  remove_host_dirs
  local name
  for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_process "$name"; done
  restore_sysctls
}

cmd_down() {
  if [[ ! -d $DIR ]]; then
    log "$DIR does not exist; nothing to take down"
    return 0
  fi
  DIR=$(cd "$DIR" && pwd)
  [[ -f $DIR/$MARKER ]] || die "$DIR was not made by '$0 up' (no $MARKER); not touching it"
  [[ -f $DIR/env ]] && . "$DIR/env"
  teardown
  if [[ -n $(findmnt -rn -o TARGET | grep -F "$DIR/") ]]; then
    log "something is still mounted under $DIR; not removing it"
    return 1
  fi
  if [[ ${KEEP:-0} == 1 ]]; then
    log "down; KEEP=1, leaving $DIR"
  else
    rm -rf "$DIR"
    log "down; removed $DIR"
  fi
}

cmd_status() {
  [[ -f $DIR/admin.kubeconfig ]] || { log "no cluster in $DIR"; return 1; }
  local name
  for name in "${PROCESSES[@]}"; do
    [[ -n $(our_pid "$name") ]] || { log "$name is not running"; return 1; }
  done
  [[ $(kc get --raw=/readyz 2>/dev/null) == ok ]] || { log "kube-apiserver is not ready"; return 1; }
  node_ready || { log "node $NODE_NAME is not Ready"; return 1; }
  log "ready: node $NODE_NAME, API $(grep KUBE_APISERVER_URL "$DIR/env" | cut -d= -f2)"
}

(($# >= 2)) || usage
DIR=$2
case $1 in
  up) shift 2; cmd_up "$@" ;;
  down) (($# == 2)) || usage; cmd_down ;;
  status)
    (($# == 2)) || usage
    [[ -d $DIR ]] || { log "no cluster in $DIR"; exit 1; }
    DIR=$(cd "$DIR" && pwd)
    [[ -f $DIR/env ]] && . "$DIR/env"
    cmd_status
    ;;
  *) usage ;;
esac
