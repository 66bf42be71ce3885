#!/usr/bin/env bash
# A real Kubernetes cluster of one to four nodes on this machine, for the
# end-to-end tests that need pods to run (e2e/real/). See e2e/README.md.
#
#   e2e/cluster.sh up DIR [--nodes N] [--zones a,b,...] [IMAGE.tar...]
#                                          start everything, import the images on
#                                          every node, write DIR/env
#   e2e/cluster.sh status DIR              exit 0 while the API answers and every node is Ready
#   e2e/cluster.sh node-stop DIR NAME      take node NAME away as if powered off: its
#                                          kubelet, containerd and containers stopped
#   e2e/cluster.sh node-start DIR NAME     bring node NAME back; returns once it is Ready
#   e2e/cluster.sh down DIR                stop everything, undo every host change, remove DIR
#                                          (KEEP=1 keeps DIR: logs, certificates)
#
# Processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# kube-proxy once; containerd and kubelet once per node. One node (the default)
# is the layout this script always had: node e2e-node, state directly in DIR.
# With --nodes N (2 to 4) the nodes are e2e-node-1..N, each with its own
# containerd (root, state, socket: no kubelet sees another's containers), pod
# subnet, bridge and cgroup root, its state in DIR/nodes/NAME. The Kubernetes
# binaries come from $ETCD_BIN, $KUBE_APISERVER_BIN,
# $KUBE_CONTROLLER_MANAGER_BIN, $KUBE_SCHEDULER_BIN, $KUBELET_BIN,
# $KUBE_PROXY_BIN; containerd, runc, the CNI plugins, iptables, buildah, gcc,
# busybox and docker-registry from Debian packages. If any is missing the script prints one line
# saying which and exits 3 (the test harness treats 3 as "skip"). It never
# downloads or builds Kubernetes.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

NODE_NAME=${NODE_NAME:-e2e-node}
MAX_NODES=4
# The pod network: each node gets a /24 of CLUSTER_CIDR from
# kube-controller-manager (the first node 10.244.0.0/24), and its bridge serves
# exactly that /24. The host routes between the bridges.
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1
# The first node's bridge; the others are numbered on from it (tpe2e1, ...).
BRIDGE=${BRIDGE:-tpe2e0}
CNI_NETWORK=taint-operator-e2e
# With several nodes each kubelet gets the cgroup root /CGROUP_PARENT/NAME:
# kubelets sharing one would each delete the others' pod cgroups as orphans.
CGROUP_PARENT=taint-operator-e2e
START_TIMEOUT=${START_TIMEOUT:-120}
# Images built here by `up` (FROM scratch, never pulled).
PAUSE_IMAGE=localhost/taint-operator-e2e/pause:1.0
BUSYBOX_IMAGE=localhost/taint-operator-e2e/busybox:1.0
# Host settings the kubelet and kube-proxy change (and ip_forward, which pods
# need); `up` saves them and `down` puts them back.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory
  net.ipv4.conf.all.route_localnet net.ipv4.ip_forward)
MARKER=.taint-operator-cluster
# Directories outside DIR that containerd 1.6 (shims), libcni, libmount and the
# kubelet (its device-plugin socket and container log links have fixed paths)
# make whatever their configuration; `down` removes those `up` did not find, if
# empty. Deepest first.
HOST_DIRS=(/run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/s
  /run/containerd/fifo /run/containerd /var/lib/cni/results /var/lib/cni/networks
  /var/lib/cni /run/mount /var/lib/kubelet/device-plugins /var/lib/kubelet
  /var/log/containers)
# The control plane and kube-proxy, one each; `status` wants them running.
# (`down` stops etcd last: kube-apiserver hangs in shutdown if etcd goes first.)
HOST_PROCESSES=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy registry)
# Pod to pod across nodes without NAT, as in a real cluster: the bridge plugin's
# ipMasq would masquerade everything leaving a node's /24. Added after
# kube-proxy's jump (which it prepends), so Service traffic is still masqueraded.
POD_TO_POD_RULE=(POSTROUTING -s "$CLUSTER_CIDR" -d "$CLUSTER_CIDR"
  -m comment --comment "$CNI_NETWORK: pod to pod across nodes, no NAT" -j RETURN)

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# free_port and the test PKI (pki_ca, pki_sign, pki_service_account_keys)
# shellcheck source=e2e/lib.sh
source "$SCRIPT_DIR/lib.sh"
skip() { echo "cluster: skip: $*" >&2; exit 3; }

usage() {
  cat >&2 <<EOF
usage: $0 {up DIR [--nodes N] [--zones a,b,...] [IMAGE.tar...]
          | status DIR | node-stop DIR NAME | node-start DIR NAME | down DIR}

  up DIR [IMAGE.tar...]  start a cluster with its state in DIR (new or empty),
                         import each docker/OCI archive into every node's
                         containerd; writes DIR/env (KUBECONFIG, NODES,
                         BUSYBOX_IMAGE, REGISTRY, ...: source it). REGISTRY is
                         a registry on loopback every node pulls from
     --nodes N           N nodes, 1 to $MAX_NODES (default 1: node NODE_NAME; more:
                         NODE_NAME-1..N), each its own kubelet and containerd
     --zones a,b,...     label the nodes topology.kubernetes.io/zone round-robin
                         over these (default: no zone label)
  status DIR             exit 0 if the API server answers and every node is Ready
  node-stop DIR NAME     power node NAME off: kill its kubelet and every container
                         of its pods, stop its containerd, cut its pods off the
                         network; the Node object stays and goes NotReady by itself
  node-start DIR NAME    start its containerd and kubelet again; waits until Ready
  down DIR               delete every pod, stop every process, restore the host
                         (iptables, bridges, mounts, cgroups, sysctls); remove DIR
                         unless KEEP=1; also with nodes stopped

env: ETCD_BIN, KUBE_APISERVER_BIN, KUBE_CONTROLLER_MANAGER_BIN,
     KUBE_SCHEDULER_BIN, KUBELET_BIN, KUBE_PROXY_BIN (exit 3 if one is unusable),
     NODE_NAME (default e2e-node), NODE_IP (default: the address of the default
     route's interface), BRIDGE (default tpe2e0, the first node's; the others
     numbered on), NODE_MONITOR_GRACE_SECONDS (default 20 with --nodes 2+,
     kube-controller-manager's own 50 s with one node), START_TIMEOUT (s), KEEP=1
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
  for tool in containerd ctr runc iptables ip buildah gcc kubectl openssl curl findmnt sysctl docker-registry; do
    command -v "$tool" >/dev/null 2>&1 || skip "'$tool' is not in PATH (Debian packages: see e2e/README.md)"
  done
  for bin in /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap /usr/lib/cni/loopback; do
    [[ -x $bin ]] || skip "$bin is missing (Debian package containernetworking-plugins)"
  done
  [[ -x /bin/busybox ]] && file_is_static /bin/busybox || skip "/bin/busybox is not a static binary (Debian package busybox-static)"
  ((EUID == 0)) || skip "must run as root (it starts a kubelet and changes iptables)"
}

file_is_static() { ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'program interpreter'; }

# A daemon that exited stays a zombie until init reaps it, which on some hosts
# takes a couple of seconds: that counts as gone.
pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

default_node_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  [[ -n $ip ]] || ip=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n1)
  [[ -n $ip ]] || die "cannot find a non-loopback IPv4 address; set NODE_IP"
  echo "$ip"
}

# ---------------------------------------------------------------- nodes
# DIR/nodes.txt, written first thing by `up`, is what every later command (and a
# teardown after a failed `up`) knows of the nodes: one line "NAME BRIDGE ZONE"
# per node (ZONE "-" for none). A DIR without it is a one-node cluster from
# before --nodes.
NODE_LIST=() NODE_BRIDGES=() NODE_ZONES=()

# The first node's bridge is BRIDGE, the others are numbered on from it.
bridge_name() { # INDEX
  if (($1 == 0)); then
    echo "$BRIDGE"
  elif [[ $BRIDGE =~ ^(.*[^0-9])([0-9]+)$ ]]; then
    echo "${BASH_REMATCH[1]}$((BASH_REMATCH[2] + $1))"
  else
    echo "$BRIDGE$1"
  fi
}

write_nodes() { # COUNT ZONE... : DIR/nodes.txt
  local count=$1 i name zone
  shift
  for ((i = 0; i < count; i++)); do
    if ((count == 1)); then name=$NODE_NAME; else name=$NODE_NAME-$((i + 1)); fi
    zone=-
    (($# == 0)) || { local zones=("$@"); zone=${zones[i % $#]}; }
    echo "$name $(bridge_name "$i") $zone"
  done >"$DIR/nodes.txt"
}

load_nodes() {
  local name bridge zone
  NODE_LIST=() NODE_BRIDGES=() NODE_ZONES=()
  if [[ -f $DIR/nodes.txt ]]; then
    while read -r name bridge zone; do
      NODE_LIST+=("$name") NODE_BRIDGES+=("$bridge") NODE_ZONES+=("$zone")
    done <"$DIR/nodes.txt"
  else
    NODE_LIST=("$NODE_NAME") NODE_BRIDGES=("$BRIDGE") NODE_ZONES=(-)
  fi
}

# Selects a node for the functions below: N_NAME, N_DIR (its state),
# N_SFX (appended to its process, log and certificate names), N_BRIDGE,
# N_ZONE, N_CGROUP (its kubelet's cgroup root, empty for the default "/") and
# N_SOCK (its containerd). One node keeps the flat layout of before: DIR/kubelet,
# DIR/containerd, DIR/kubelet.pid, pki/kubelet.crt.
use_node() { # NAME
  local i=0
  for i in "${!NODE_LIST[@]}"; do
    [[ ${NODE_LIST[i]} != "$1" ]] || break
  done
  [[ ${NODE_LIST[i]:-} == "$1" ]] || die "no node $1 in this cluster (nodes: ${NODE_LIST[*]})"
  N_NAME=$1 N_BRIDGE=${NODE_BRIDGES[i]} N_ZONE=${NODE_ZONES[i]}
  [[ $N_ZONE != - ]] || N_ZONE=""
  if ((${#NODE_LIST[@]} == 1)); then
    N_DIR=$DIR N_SFX="" N_CGROUP=""
  else
    N_DIR=$DIR/nodes/$1 N_SFX=-$1 N_CGROUP=/$CGROUP_PARENT/$1
  fi
  N_SOCK=$N_DIR/containerd/containerd.sock
}

node_running() { [[ -n $(our_pid "kubelet$N_SFX") ]]; }
runtime_running() { [[ -n $(our_pid "containerd$N_SFX") ]]; }

# ---------------------------------------------------------------- certificates
gen_certs() { # DIR
  local d=$1/pki
  pki_ca "$d" taint-operator-e2e-cluster-ca
  pki_sign "$d" apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$NODE_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  pki_sign "$d" admin "/O=system:masters/CN=e2e-admin" clientAuth
  # the API server's identity towards the kubelet (logs, exec)
  pki_sign "$d" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  pki_sign "$d" kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  pki_sign "$d" kube-scheduler "/CN=system:kube-scheduler" clientAuth
  pki_sign "$d" kube-proxy "/CN=system:kube-proxy" clientAuth
  local name
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    # all nodes share the host's address; each kubelet serves on its own port
    pki_sign "$d" "kubelet-serving$N_SFX" "/CN=$name" serverAuth "IP:$NODE_IP,DNS:$name"
    # node identity without TLS bootstrap
    pki_sign "$d" "kubelet$N_SFX" "/O=system:nodes/CN=system:node:$name" clientAuth
  done
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
# Each runs under setsid (a Ctrl-C in the caller's terminal
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

# SIGKILL, as a power cut would: the process gets no chance to tidy up.
kill_process() { # NAME
  local pid
  pid=$(our_pid "$1")
  if [[ -n $pid ]]; then
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
  fi
  rm -f "$DIR/$1.pid"
}

wait_for() { # WHAT SECONDS NAME-OF-PROCESS-THAT-MUST-LIVE COMMAND...
  local what=$1 seconds=$2 deadline=$((SECONDS + $2)) name=$3
  shift 3
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    [[ -n $(our_pid "$name") ]] || { tail -n 20 "$DIR/$name.log" >&2; die "$name exited while waiting for $what (log: $DIR/$name.log)"; }
    sleep 0.5
  done
  tail -n 20 "$DIR/$name.log" >&2
  die "timed out after $seconds s waiting for $what (log: $DIR/$name.log)"
}

kc() { kubectl --kubeconfig="$DIR/admin.kubeconfig" --request-timeout=10s "$@"; }
# the selected node's containerd (use_node)
ctr_() { ctr --address "$N_SOCK" --namespace k8s.io "$@"; }

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
  # How long a node may go without a heartbeat before it is NotReady (Unknown)
  # and tainted unreachable; the kubelets renew their Lease four times as often
  # (see write_kubelet_config). Pod eviction keeps its defaults.
  local monitor=()
  [[ -z $NODE_MONITOR_GRACE_SECONDS ]] || monitor=(--node-monitor-grace-period="${NODE_MONITOR_GRACE_SECONDS}s")
  # Every controller: node lifecycle lifts node.kubernetes.io/not-ready and
  # taint eviction evicts pods from NoExecute taints, as in a real cluster.
  spawn kube-controller-manager "$KUBE_CONTROLLER_MANAGER_BIN" \
    --kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
    --secure-port=0 --leader-elect=false --controllers='*' \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
    --service-cluster-ip-range="$SERVICE_CIDR" --profiling=false "${monitor[@]}"
  spawn kube-scheduler "$KUBE_SCHEDULER_BIN" \
    --kubeconfig="$DIR/kube-scheduler.kubeconfig" \
    --secure-port=0 --leader-elect=false --profiling=false
}

# The selected node's containerd: its own root, state and socket under N_DIR,
# its own CNI conf dir (empty until the node has its pod subnet: see
# write_cni_config).
write_containerd_config() {
  local c=$N_DIR/containerd
  mkdir -p "$c" "$N_DIR/cni/net.d" "$N_DIR/cni/ipam"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
# containerd's own /opt plugin would write to /opt/containerd
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = "$N_SOCK"

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
    conf_dir = "$N_DIR/cni/net.d"
  # the cluster's registry (start_registry), reached over plain HTTP
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$DIR/registry/hosts"
EOF
}

# The selected node's CNI network: one bridge serving the pod subnet
# kube-controller-manager gave the node. containerd 1.6's CRI watches its conf
# dir and reloads on a write, rename or removal there (not on a creation), then
# reports the network ready. So the file is written under a name libcni ignores
# (not .conf, .conflist or .json) and renamed: the reload sees all of it.
write_cni_config() { # POD-CIDR
  local tmp=$N_DIR/cni/net.d/.conflist.tmp
  echo "$1" >"$N_DIR/cni/pod-cidr"
  cat >"$tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$N_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$1"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$N_DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  mv "$tmp" "$N_DIR/cni/net.d/10-$CNI_NETWORK.conflist"
}

run_containerd() {
  spawn "containerd$N_SFX" containerd --config "$N_DIR/containerd/config.toml"
}

wait_containerd() {
  wait_for "containerd of $N_NAME" 30 "containerd$N_SFX" ctr_ version
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

# The selected node's kubelet cgroup root, in every cgroup v1 hierarchy: the
# kubelet refuses a cgroupRoot that does not exist. A new cpuset cgroup starts
# with no CPUs and no memory nodes, so it gets its parent's.
make_cgroup_root() {
  [[ -n $N_CGROUP ]] || return 0
  local mnt path part
  for mnt in $(findmnt -rn -t cgroup -o TARGET); do
    path=$mnt
    for part in ${N_CGROUP//\// }; do
      if [[ ! -d $path/$part ]]; then
        mkdir "$path/$part"
        if [[ -f $path/cpuset.cpus ]]; then
          cat "$path/cpuset.cpus" >"$path/$part/cpuset.cpus"
          cat "$path/cpuset.mems" >"$path/$part/cpuset.mems"
        fi
      fi
      path=$path/$part
    done
  done
}

write_kubelet_config() {
  local k=$N_DIR/kubelet extra=""
  mkdir -p "$k/root" "$k/pod-logs"
  free_port KUBELET_PORT "$NODE_IP"
  free_port KUBELET_HEALTHZ_PORT 127.0.0.1
  write_kubeconfig "$k/kubeconfig" "kubelet$N_SFX"
  # Its own cgroup root when several kubelets share the host.
  [[ -z $N_CGROUP ]] || extra+="cgroupRoot: $N_CGROUP"$'\n'
  # The Lease is renewed every quarter of its duration: four renewals within
  # kube-controller-manager's --node-monitor-grace-period, so a busy machine's
  # late renewal does not flap the node.
  [[ -z $NODE_MONITOR_GRACE_SECONDS ]] || extra+="nodeLeaseDurationSeconds: $NODE_MONITOR_GRACE_SECONDS"$'\n'
  cat >"$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host has cgroup v1 (v2 only as a hybrid mount); kubelet 1.36 refuses it
# unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$N_SOCK
podLogsDir: $k/pod-logs
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $DIR/pki/kubelet-serving$N_SFX.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving$N_SFX.key
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
$extra
EOF
}

# The zone label comes with the registration, as a cloud's kubelet sets it
# (NodeRestriction lets a kubelet set topology.kubernetes.io/zone), so no pod is
# scheduled on a node before it has its zone; a restarted kubelet puts it back.
run_kubelet() {
  local k=$N_DIR/kubelet labels=()
  [[ -z $N_ZONE ]] || labels=(--node-labels="topology.kubernetes.io/zone=$N_ZONE")
  spawn "kubelet$N_SFX" "$KUBELET_BIN" --config="$k/config.yaml" --kubeconfig="$k/kubeconfig" \
    --root-dir="$k/root" --hostname-override="$N_NAME" --node-ip="$NODE_IP" "${labels[@]}"
}

start_kube_proxy() {
  write_kubeconfig "$DIR/kube-proxy.kubeconfig" kube-proxy
  free_port PROXY_HEALTHZ_PORT 127.0.0.1
  free_port PROXY_METRICS_PORT 127.0.0.1
  # conntrack limits and timeouts are host-wide: leave them as they are.
  # --masquerade-all: a pod reaching a Service backed by a pod on the same bridge
  # gets its reply through the host, without br_netfilter.
  # One kube-proxy serves the host's network namespace, so every node's pods; it
  # takes the first node for its own (what "Local" traffic policies count as local).
  spawn kube-proxy "$KUBE_PROXY_BIN" --kubeconfig="$DIR/kube-proxy.kubeconfig" \
    --hostname-override="${NODE_LIST[0]}" --proxy-mode=iptables --cluster-cidr="$CLUSTER_CIDR" \
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

# The selected node (use_node) as the API server sees it.
node_field() { kc get node "$N_NAME" -o jsonpath="$1"; }
node_ready() { [[ $(node_field '{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
node_has_cidr() { [[ -n $(node_field '{.spec.podCIDR}') ]]; }
# Pods can be created once the ServiceAccount controller made "default", and
# scheduled on the node once the node lifecycle controller lifted not-ready.
node_untainted() { [[ -z $(node_field '{.spec.taints}') ]]; }
# What node-start waits for: the node lifecycle controller's taints gone (a
# test's own taints may stay).
node_reachable() {
  local keys
  keys=$(node_field '{.spec.taints[*].key}') || return 1
  [[ ! $keys =~ node\.kubernetes\.io/(not-ready|unreachable) ]]
}
default_sa() { kc get serviceaccount default -n default; }
# kube-proxy programmed the `kubernetes` Service
service_programmed() { iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -qF 'default/kubernetes:https'; }

# The cluster's image registry: Debian's docker-registry on a loopback port,
# storage in DIR/registry. Every node's containerd pulls from it over plain HTTP
# (see write_containerd_config); the operator's image and chart are pushed to it
# (REGISTRY in DIR/env) and installed from it, as from any registry.
start_registry() {
  local r=$DIR/registry
  free_port REGISTRY_PORT 127.0.0.1
  REGISTRY=127.0.0.1:$REGISTRY_PORT
  mkdir -p "$r/data" "$r/hosts/$REGISTRY"
  cat >"$r/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $r/data
  delete:
    enabled: true
http:
  addr: $REGISTRY
EOF
  cat >"$r/hosts/$REGISTRY/hosts.toml" <<EOF
server = "http://$REGISTRY"
[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
  spawn registry docker-registry serve "$r/config.yml"
  registry_up() { curl -fsS --max-time 2 "http://$REGISTRY/v2/" >/dev/null; }
  wait_for "the registry on $REGISTRY" 30 registry registry_up
}

# ---------------------------------------------------------------- up
on_up_exit() {
  local rc=$?
  if ((rc != 0 && rc != 3)); then
    log "up failed; tearing down, logs kept in $DIR"
    KEEP=1 teardown
  fi
}

cmd_up() {
  local image images=() count=1 zones=()
  while (($#)); do
    case $1 in
      --nodes) (($# >= 2)) || usage; count=$2; shift 2 ;;
      --nodes=*) count=${1#*=}; shift ;;
      --zones) (($# >= 2)) || usage; IFS=, read -ra zones <<<"$2"; shift 2 ;;
      --zones=*) IFS=, read -ra zones <<<"${1#*=}"; shift ;;
      -*) usage ;;
      *) images+=("$1"); shift ;;
    esac
  done
  [[ $count =~ ^[1-9][0-9]*$ ]] && ((count <= MAX_NODES)) || die "--nodes wants 1 to $MAX_NODES, not '$count'"
  local zone
  for zone in "${zones[@]}"; do
    [[ $zone =~ ^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$ ]] || die "--zones: '$zone' is not a label value"
  done
  # Several nodes: NotReady within 20-25 s of a node-stop rather than about a minute.
  if [[ -z ${NODE_MONITOR_GRACE_SECONDS:-} ]] && ((count > 1)); then NODE_MONITOR_GRACE_SECONDS=20; fi
  NODE_MONITOR_GRACE_SECONDS=${NODE_MONITOR_GRACE_SECONDS:-}
  [[ -z $NODE_MONITOR_GRACE_SECONDS || $NODE_MONITOR_GRACE_SECONDS =~ ^[1-9][0-9]*$ ]] \
    || die "NODE_MONITOR_GRACE_SECONDS wants whole seconds, not '$NODE_MONITOR_GRACE_SECONDS'"
  check_prerequisites
  for image in "${images[@]}"; do [[ -f $image ]] || die "image archive $image not found"; done
  if [[ -e $DIR && -n $(ls -A "$DIR" 2>/dev/null) ]]; then
    die "$DIR exists and is not empty; '$0 down $DIR' first or pick another DIR"
  fi
  local i bridge
  for ((i = 0; i < count; i++)); do
    bridge=$(bridge_name "$i")
    ((${#bridge} <= 15)) || die "bridge name $bridge is longer than 15 characters; pick a shorter BRIDGE"
    if ip link show "$bridge" >/dev/null 2>&1; then
      die "network interface $bridge exists: another cluster runs, or one was not taken down ('$0 down DIR')"
    fi
  done
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  touch "$DIR/$MARKER"
  write_nodes "$count" "${zones[@]}"
  load_nodes
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
  start_registry
  start_etcd
  start_apiserver
  start_controllers
  local name
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    make_cgroup_root
    write_containerd_config
    run_containerd
  done
  for name in "${NODE_LIST[@]}"; do use_node "$name"; wait_containerd; done
  wait "$images_pid" || die "building the pause and busybox images failed (log: $DIR/images.log)"
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    for image in "$DIR/images/pause.tar" "$DIR/images/busybox.tar" "${images[@]}"; do
      import_image "$image"
    done
  done
  # One kubelet at a time, the next once the last has its pod subnet: the /24s
  # go out in the order the nodes register, so the first node's is always
  # 10.244.0.0/24 and the others follow in order (kube-controller-manager now and
  # then skips one). Each node costs about a second more than all at once.
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    write_kubelet_config
    run_kubelet
    wait_for "a pod CIDR for $name" "$START_TIMEOUT" "kubelet$N_SFX" node_has_cidr
    write_cni_config "$(node_field '{.spec.podCIDR}')"
  done
  start_kube_proxy
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    wait_for "node $name Ready" "$START_TIMEOUT" "kubelet$N_SFX" node_ready
  done
  wait_for "the default ServiceAccount" "$START_TIMEOUT" kube-controller-manager default_sa
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    wait_for "node.kubernetes.io/not-ready lifted from $name" "$START_TIMEOUT" kube-controller-manager node_untainted
  done
  wait_for "kube-proxy rules for the kubernetes Service" "$START_TIMEOUT" kube-proxy service_programmed
  ((count == 1)) || iptables -w -t nat -A "${POD_TO_POD_RULE[@]}"

  {
    cat <<EOF
export KUBECONFIG=$DIR/admin.kubeconfig
export CLUSTER_DIR=$DIR
export NODE_NAME=${NODE_LIST[0]}
export NODES="${NODE_LIST[*]}"
export NODE_IP=$NODE_IP
export KUBE_APISERVER_URL=$APISERVER_URL
# the image registry every node pulls from (plain HTTP on loopback)
export REGISTRY=$REGISTRY
EOF
    echo "# the first node's containerd, and each node's (CONTAINERD_ADDRESS_<i>: the i-th of NODES)"
    use_node "${NODE_LIST[0]}"
    echo "export CONTAINERD_ADDRESS=$N_SOCK"
    for i in "${!NODE_LIST[@]}"; do
      use_node "${NODE_LIST[i]}"
      echo "export CONTAINERD_ADDRESS_$((i + 1))=$N_SOCK"
    done
    cat <<EOF
export PAUSE_IMAGE=$PAUSE_IMAGE
export BUSYBOX_IMAGE=$BUSYBOX_IMAGE
# for \`down\` (kube-proxy --cleanup) and \`node-start\` in a shell without the variables
export KUBE_PROXY_BIN=$KUBE_PROXY_BIN
export KUBELET_BIN=$KUBELET_BIN
EOF
  } >"$DIR/env"
  trap - EXIT
  local nodes=""
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    nodes+="$name${N_ZONE:+ (zone $N_ZONE)} "
  done
  use_node "${NODE_LIST[0]}"
  cat <<EOF
cluster ready in $((SECONDS - t0))s: ${#NODE_LIST[@]} node(s) on $NODE_IP, API $APISERVER_URL
  nodes    $nodes
  images   $(ctr_ images ls -q | grep -v '^sha256:' | tr '\n' ' ')
  registry $REGISTRY (every node pulls from it)
  logs     $DIR/*.log
  env      source $DIR/env
  down     $0 down $DIR
EOF
}

# ---------------------------------------------------------------- down
# Pods first, through the kubelets: stopping a pod runs CNI DEL (veth, IPAM,
# the bridge plugin's masquerade rules) and unmounts its volumes. Pods of a
# stopped node (node-stop) have no kubelet to stop them: what they left on the
# host goes below (mounts, chains, cgroups), with the node's state.
delete_pods() {
  [[ -n $(our_pid kube-apiserver) ]] || return 0
  local name running=()
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    if node_running && runtime_running; then running+=("$name"); fi
  done
  ((${#running[@]})) || return 0
  kc delete daemonsets,deployments,replicasets,statefulsets,jobs --all --all-namespaces --wait=false >/dev/null 2>&1 || true
  kc delete pods --all --all-namespaces --grace-period=5 --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 90)) nodes left
  while ((SECONDS < deadline)); do
    # the nodes of the pods still there (unscheduled pods go at once)
    nodes=$(kc get pods --all-namespaces -o jsonpath='{range .items[*]}{.spec.nodeName}{" "}{end}' 2>/dev/null) || return 0
    left=0
    for name in $nodes; do
      [[ " ${running[*]} " != *" $name "* ]] || left=1
    done
    ((left)) || return 0
    sleep 1
  done
  log "pods still present after 90 s; stopping their containers directly"
}

# Every task of the selected node's containerd killed and deleted, so that
# the shims exit and the containers' root filesystems are unmounted. The
# containers stay: a kubelet started again sees them exited, as after a reboot.
kill_tasks() {
  local id ids
  ids=$(ctr_ tasks ls -q 2>/dev/null || true)
  [[ -n $ids ]] || return 0
  for id in $ids; do
    ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
  done
}

# Whatever the kubelet did not stop: kill the tasks and remove the sandboxes
# through containerd, so that the shims exit.
stop_containers() {
  runtime_running || return 0
  kill_tasks
  local id
  for id in $(ctr_ containers ls -q 2>/dev/null); do
    ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    ctr_ containers delete "$id" >/dev/null 2>&1 || true
  done
}

# containerd's shims outlive it; they were started for the selected node's containerd.
stop_shims() {
  local pid
  for pid in $(pgrep -f "containerd-shim.*-address $N_SOCK( |$)" || true); do
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

# The kubelets' cgroups (cgroupfs driver): kubepods/{besteffort,burstable}/pod*/...
# under each hierarchy, with several nodes under CGROUP_PARENT/NAME (our own
# roots, removed too). rmdir only removes empty ones.
remove_cgroups() {
  local root top
  for root in $(findmnt -rn -t cgroup,cgroup2 -o TARGET); do
    if ((${#NODE_LIST[@]} > 1)); then top=$root/$CGROUP_PARENT; else top=$root/kubepods; fi
    [[ -d $top ]] || continue
    find "$top" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    if [[ -d $top ]]; then log "cgroup $top is not empty; left in place"; fi
  done
}

remove_network() {
  if [[ -n ${KUBE_PROXY_BIN:-} && -x ${KUBE_PROXY_BIN:-} ]]; then
    "$KUBE_PROXY_BIN" --cleanup >>"$DIR/kube-proxy.log" 2>&1 || log "kube-proxy --cleanup failed (log: $DIR/kube-proxy.log)"
  elif iptables -w -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
    log "KUBE_PROXY_BIN is unusable; kube-proxy's iptables chains are left (run 'kube-proxy --cleanup')"
  fi
  # the bridge plugin's per-pod masquerade chains, if a pod was not torn down (a
  # stopped node's): -S quotes the comment as name: \"NETWORK\"; the jumps go
  # by number, as their comments do not survive word splitting
  local chain num
  for chain in $(iptables -w -t nat -S POSTROUTING 2>/dev/null | grep -F "name: \\\"$CNI_NETWORK\\\"" | grep -o 'CNI-[0-9a-f]*' | sort -u); do
    while num=$(iptables -w -t nat -L POSTROUTING -n --line-numbers | awk -v c="$chain" '$2 == c {print $1; exit}') && [[ -n $num ]]; do
      iptables -w -t nat -D POSTROUTING "$num" || break
    done
    iptables -w -t nat -F "$chain" 2>/dev/null || true
    iptables -w -t nat -X "$chain" 2>/dev/null || true
  done
  while iptables -w -t nat -D "${POD_TO_POD_RULE[@]}" 2>/dev/null; do :; done
  remove_kubelet_chains
  local name cidr
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    if ip link show "$N_BRIDGE" >/dev/null 2>&1; then
      ip link delete "$N_BRIDGE" || log "could not delete interface $N_BRIDGE"
    fi
    # a stopped node's blackholed subnet
    cidr=$(cat "$N_DIR/cni/pod-cidr" 2>/dev/null || true)
    [[ -z $cidr ]] || ip route del blackhole "$cidr" 2>/dev/null || true
  done
  # libcni's cache of results, for pods whose DEL never ran (a stopped node's):
  # the network's, and the loopback's of the same sandboxes
  local result id
  for result in /var/lib/cni/results/"$CNI_NETWORK"-*; do
    [[ -e $result ]] || continue
    id=${result#/var/lib/cni/results/"$CNI_NETWORK"-}
    rm -f "$result" /var/lib/cni/results/cni-loopback-"${id%-*}"-lo
  done
}

remove_host_dirs() {
  # the kubelets' links to container logs in DIR (a pod no kubelet stopped leaves its own)
  local link
  for link in /var/log/containers/*.log; do
    [[ -L $link && $(readlink "$link") == "$DIR/"* ]] && rm -f "$link"
  done
  [[ -f $DIR/host-dirs.absent ]] || return 0
  # the device manager's socket and checkpoint: a fixed path, whatever --root-dir
  if grep -qxF /var/lib/kubelet/device-plugins "$DIR/host-dirs.absent"; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  fi
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
  local name
  delete_pods
  for name in "${NODE_LIST[@]}"; do use_node "$name"; stop_process "kubelet$N_SFX"; done
  stop_process kube-proxy
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    stop_containers
    stop_process "containerd$N_SFX"
    stop_shims
  done
  remove_network
  unmount_all
  remove_cgroups
  remove_host_dirs
  for name in registry kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_process "$name"; done
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
  load_nodes
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

# ---------------------------------------------------------------- node-stop, node-start
# A powered-off machine's pods are unreachable: the node's bridge goes down and
# its pod subnet is blackholed (without that route its traffic would take the
# default route off the machine). Each pod's network namespace keeps its
# address until the kubelet, started again, tears the old sandbox down.
isolate_node_network() {
  local cidr
  cidr=$(cat "$N_DIR/cni/pod-cidr" 2>/dev/null || true)
  if ip link show "$N_BRIDGE" >/dev/null 2>&1; then ip link set "$N_BRIDGE" down; fi
  [[ -z $cidr ]] || ip route replace blackhole "$cidr"
}

# The blackhole first: the bridge's own route for the subnet comes back with it.
connect_node_network() {
  local cidr
  cidr=$(cat "$N_DIR/cni/pod-cidr" 2>/dev/null || true)
  [[ -z $cidr ]] || ip route del blackhole "$cidr" 2>/dev/null || true
  if ip link show "$N_BRIDGE" >/dev/null 2>&1; then ip link set "$N_BRIDGE" up; fi
}

# Processes still in the selected node's pod cgroups once its containerd and
# shims are gone (none, normally): the node's containers, so ours to kill.
kill_pod_processes() {
  local mnt pids=()
  for mnt in $(findmnt -rn -t cgroup -o TARGET); do
    [[ -d $mnt$N_CGROUP/kubepods ]] || continue
    mapfile -t pids < <(find "$mnt$N_CGROUP/kubepods" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    break
  done
  ((${#pids[@]})) || return 0
  log "killing ${#pids[@]} process(es) left in the pod cgroups of $N_NAME"
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

cmd_node_stop() { # NAME
  use_node "$1"
  if ! node_running && ! runtime_running; then
    log "node $1 is already stopped"
    return 0
  fi
  kill_process "kubelet$N_SFX"
  local tasks=0
  if runtime_running; then
    tasks=$(ctr_ tasks ls -q 2>/dev/null | wc -l)
    kill_tasks
  fi
  stop_process "containerd$N_SFX"
  stop_shims
  kill_pod_processes
  isolate_node_network
  log "node $1 is off: kubelet killed, $tasks task(s) killed, containerd stopped; the Node goes NotReady on its own"
}

# The kubelet renewed the node's Lease since EPOCH (a Ready condition from
# before node-stop may not have expired yet).
lease_renewed_since() { # EPOCH
  local t
  t=$(kc get lease -n kube-node-lease "$N_NAME" -o jsonpath='{.spec.renewTime}') || return 1
  [[ -n $t ]] && (($(date -d "$t" +%s) >= $1))
}

cmd_node_start() { # NAME
  use_node "$1"
  if node_running; then
    log "node $1 is running"
    return 0
  fi
  [[ -n ${KUBELET_BIN:-} && -x ${KUBELET_BIN:-} ]] || die "KUBELET_BIN is not set or not executable"
  local t0=$SECONDS since
  since=$(date +%s)
  connect_node_network
  if ! runtime_running; then
    run_containerd
    wait_containerd
  fi
  run_kubelet
  wait_for "node $1's kubelet to renew its Lease" "$START_TIMEOUT" "kubelet$N_SFX" lease_renewed_since "$since"
  wait_for "node $1 Ready" "$START_TIMEOUT" "kubelet$N_SFX" node_ready
  wait_for "not-ready and unreachable lifted from $1" "$START_TIMEOUT" kube-controller-manager node_reachable
  log "node $1 is back in $((SECONDS - t0))s"
}

cmd_status() {
  [[ -f $DIR/admin.kubeconfig ]] || { log "no cluster in $DIR"; return 1; }
  local name rc=0
  for name in "${HOST_PROCESSES[@]}"; do
    [[ -n $(our_pid "$name") ]] || { log "$name is not running"; return 1; }
  done
  [[ $(kc get --raw=/readyz 2>/dev/null) == ok ]] || { log "kube-apiserver is not ready"; return 1; }
  for name in "${NODE_LIST[@]}"; do
    use_node "$name"
    if ! node_running || ! runtime_running; then
      log "node $name is stopped (its kubelet or containerd is not running)"
      rc=1
    elif ! node_ready; then
      log "node $name is not Ready"
      rc=1
    fi
  done
  ((rc == 0)) || return 1
  log "ready: node(s) ${NODE_LIST[*]}, API $(grep KUBE_APISERVER_URL "$DIR/env" | cut -d= -f2)"
}

# An existing cluster's DIR, its env and its nodes, for every command but up.
open_cluster() {
  [[ -d $DIR ]] || { log "no cluster in $DIR"; exit 1; }
  DIR=$(cd "$DIR" && pwd)
  [[ -f $DIR/env ]] || { log "no cluster in $DIR (no env: not up, or up failed)"; exit 1; }
  . "$DIR/env"
  load_nodes
}

(($# >= 2)) || usage
DIR=$2
case $1 in
  up) shift 2; cmd_up "$@" ;;
  down) (($# == 2)) || usage; cmd_down ;;
  status) (($# == 2)) || usage; open_cluster; cmd_status ;;
  node-stop) (($# == 3)) || usage; open_cluster; cmd_node_stop "$3" ;;
  node-start) (($# == 3)) || usage; open_cluster; cmd_node_start "$3" ;;
  *) usage ;;
esac
