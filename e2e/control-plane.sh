#!/usr/bin/env bash
# Start/stop a bare Kubernetes control plane (etcd + kube-apiserver, nothing else)
# on loopback for the taint-operator end-to-end tests. See e2e/README.md.
#
#   e2e/control-plane.sh start  DIR   generate certs, start etcd + kube-apiserver, apply RBAC
#   e2e/control-plane.sh rbac   DIR   re-apply the operator's ClusterRole/Role (+ bindings)
#   e2e/control-plane.sh status DIR   exit 0 if the apiserver in DIR answers /readyz
#   e2e/control-plane.sh stop   DIR   stop both processes, remove DIR (keep it with KEEP=1)
#   e2e/control-plane.sh restart-apiserver DIR | restart-etcd DIR
#                                     stop one process and start it again, same ports (and data)
#
# Binaries come from $KUBE_APISERVER_BIN and $ETCD_BIN; if either is missing the
# script exits 3 (the e2e harness treats 3 as "skip"). It never downloads or builds.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)

OPERATOR_NAMESPACE=${OPERATOR_NAMESPACE:-taint-operator}
OPERATOR_USER=taint-operator
RBAC_RULES_FILE=${RBAC_RULES_FILE:-$REPO_ROOT/charts/taint-operator/files/clusterrole-rules.yaml}
CHART_VALUES_FILE=$REPO_ROOT/charts/taint-operator/values.yaml
START_TIMEOUT=${START_TIMEOUT:-90}
# Admission plugins that assume a kubelet / kube-controller-manager exist:
#  - ServiceAccount rejects pods until the namespace's "default" ServiceAccount exists,
#    which only kube-controller-manager creates (and we create test namespaces on the fly).
#  - TaintNodesByCondition puts node.kubernetes.io/not-ready:NoSchedule on every new Node,
#    and only the node lifecycle controller (kube-controller-manager) would ever remove it.
DISABLE_ADMISSION_PLUGINS=${DISABLE_ADMISSION_PLUGINS:-ServiceAccount,TaintNodesByCondition}
# etcd refuses writes ("database space exceeded") once its file reaches this size.
# Its 2 GiB default is too small for the scale benchmark: 5,000 nodes of 12 kB
# written ~100,000 times fill it faster than the API server's compaction frees it.
ETCD_QUOTA_BYTES=${ETCD_QUOTA_BYTES:-8589934592}
# A soft limit on kube-apiserver's Go heap (GOMEMLIMIT): Go lets a heap grow to twice
# what it holds before collecting. At 15,000 nodes and 450,000 pods the API server
# holds over 8 GiB (the watch caches and their event history), and its heap passed
# 18 GiB of a 24 GiB machine within minutes. With the limit, Go collects more often
# as the heap nears it. Default: 60% of the machine's memory; "off" for none.
APISERVER_MEMORY_LIMIT=${APISERVER_MEMORY_LIMIT:-$(awk '/^MemTotal:/ { printf "%dMiB", $2 * 0.6 / 1024 }' /proc/meminfo)}
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
MARKER=.taint-operator-control-plane

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# free_port and the test PKI (pki_ca, pki_sign, pki_service_account_keys)
# shellcheck source=e2e/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
  cat >&2 <<EOF
usage: $0 {start|stop|rbac|status} DIR

  start DIR   create DIR, certs, start etcd + kube-apiserver on free loopback ports,
              apply the operator RBAC; writes DIR/admin.kubeconfig,
              DIR/operator.kubeconfig and DIR/env (source it)
  rbac DIR    re-apply ClusterRole/ClusterRoleBinding "taint-operator" (rules from
              $RBAC_RULES_FILE) and the leases Role/RoleBinding
  status DIR  exit 0 if the control plane in DIR is ready
  stop DIR    stop etcd and kube-apiserver; remove DIR unless KEEP=1
  restart-apiserver DIR   stop kube-apiserver and start it again on the same port
  restart-etcd DIR        stop etcd and start it again on the same ports and data

env: KUBE_APISERVER_BIN, ETCD_BIN (required for start; exit 3 if unusable),
     OPERATOR_NAMESPACE (default taint-operator), RBAC_RULES_FILE, START_TIMEOUT (s),
     DISABLE_ADMISSION_PLUGINS (default ServiceAccount,TaintNodesByCondition),
     ETCD_QUOTA_BYTES (default 8 GiB),
     APISERVER_MEMORY_LIMIT (kube-apiserver's GOMEMLIMIT; default 60% of RAM),
     KUBE_APISERVER_EXTRA_ARGS, KEEP=1
EOF
  exit 2
}

need_tool() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found in PATH; it is required ($2)"
}

check_binaries() {
  local var bin
  for var in KUBE_APISERVER_BIN ETCD_BIN; do
    bin=${!var:-}
    if [[ -z $bin ]]; then
      echo "control-plane: skip: $var is not set (see e2e/README.md for how to get the binary)" >&2
      exit 3
    fi
    if [[ ! -f $bin || ! -x $bin ]]; then
      echo "control-plane: skip: $var=$bin is not an executable file (see e2e/README.md)" >&2
      exit 3
    fi
  done
}

abspath() { mkdir -p "$1" && (cd "$1" && pwd); }

pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

# ---------------------------------------------------------------- certificates
gen_certs() {
  local d=$1/pki
  pki_ca "$d" taint-operator-e2e-ca
  pki_sign "$d" apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,DNS:localhost,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  pki_sign "$d" admin "/O=system:masters/CN=e2e-admin" clientAuth
  pki_sign "$d" operator "/CN=$OPERATOR_USER" clientAuth
  pki_service_account_keys "$d"
}

write_kubeconfig() { # FILE USER CERT KEY SERVER PKI
  local f=$1 user=$2 crt=$3 key=$4 server=$5 pki=$6
  rm -f "$f"
  kubectl config --kubeconfig="$f" set-cluster e2e --server="$server" \
    --certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$f" set-credentials "$user" \
    --client-certificate="$crt" --client-key="$key" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$f" set-context e2e --cluster=e2e --user="$user" >/dev/null
  kubectl config --kubeconfig="$f" use-context e2e >/dev/null
  chmod 600 "$f"
}

# ---------------------------------------------------------------- processes
# Background processes get stdin/stdout/stderr away from the caller, so a test
# harness that captures this script's output does not wait for them.
start_etcd() { # DIR [restart: same ports and data]
  local dir=$1 restart=${2:-} attempt
  for attempt in 1 2 3; do
    if [[ -z $restart ]]; then
      free_port ETCD_PORT
      free_port ETCD_PEER_PORT
      rm -rf "$dir/etcd-data"
    fi
    "$ETCD_BIN" --name e2e --data-dir "$dir/etcd-data" \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster-state new --logger zap --log-outputs stderr \
      --quota-backend-bytes "$ETCD_QUOTA_BYTES" \
      </dev/null >>"$dir/etcd.log" 2>&1 &
    echo $! >"$dir/etcd.pid"
    local pid=$!
    for _ in $(seq 1 100); do
      if ! pid_alive "$pid"; then break; fi
      if curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then
        return 0
      fi
      sleep 0.2
    done
    if pid_alive "$pid"; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    if [[ -z $restart ]] && grep -q 'address already in use' "$dir/etcd.log"; then
      log "etcd port clash (attempt $attempt), retrying"
      continue
    fi
    tail -n 20 "$dir/etcd.log" >&2
    die "etcd did not become healthy or exited (log: $dir/etcd.log)"
  done
  die "etcd could not bind a free port"
}

start_apiserver() { # DIR [restart: same port]
  local dir=$1 restart=${2:-} pki=$1/pki attempt
  # shellcheck disable=SC2206
  local extra=(${KUBE_APISERVER_EXTRA_ARGS:-})
  for attempt in 1 2 3; do
    if [[ -z $restart ]]; then
      free_port APISERVER_PORT
      APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
      write_kubeconfig "$dir/admin.kubeconfig" e2e-admin "$pki/admin.crt" "$pki/admin.key" "$APISERVER_URL" "$pki"
    fi
    GOMEMLIMIT=$APISERVER_MEMORY_LIMIT "$KUBE_APISERVER_BIN" \
      --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
      --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
      --secure-port="$APISERVER_PORT" \
      --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
      --client-ca-file="$pki/ca.crt" \
      --authorization-mode=RBAC \
      --service-account-issuer=https://kubernetes.default.svc.cluster.local \
      --service-account-key-file="$pki/sa.pub" \
      --service-account-signing-key-file="$pki/sa.key" \
      --api-audiences=https://kubernetes.default.svc.cluster.local \
      --service-cluster-ip-range="$SERVICE_CIDR" \
      --endpoint-reconciler-type=none \
      --disable-admission-plugins="$DISABLE_ADMISSION_PLUGINS" \
      --allow-privileged=true \
      --profiling=false \
      "${extra[@]}" \
      </dev/null >>"$dir/kube-apiserver.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/kube-apiserver.pid"
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
      if ! pid_alive "$pid"; then break; fi
      # lost a race for the port: retry at once instead of probing a foreign listener
      if grep -q 'address already in use' "$dir/kube-apiserver.log"; then break; fi
      if [[ $(curl -sS --max-time 3 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
        "$APISERVER_URL/readyz" 2>/dev/null) == ok ]]; then
        return 0
      fi
      sleep 0.5
    done
    local timed_out=0
    if pid_alive "$pid"; then timed_out=1; kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    if [[ -z $restart ]] && grep -q 'address already in use' "$dir/kube-apiserver.log"; then
      log "kube-apiserver port clash (attempt $attempt), retrying"
      continue
    fi
    tail -n 30 "$dir/kube-apiserver.log" >&2
    if ((timed_out)); then
      die "kube-apiserver not ready within ${START_TIMEOUT}s (log: $dir/kube-apiserver.log)"
    fi
    die "kube-apiserver exited during startup (log: $dir/kube-apiserver.log)"
  done
  die "kube-apiserver could not bind a free port"
}

# PID from DIR/NAME.pid if that process is still ours (its command line mentions
# DIR), so a stale pid file never makes us signal an unrelated process.
our_pid() { # DIR NAME
  local pid
  pid=$(cat "$1/$2.pid" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$1/"; then
    echo "$pid"
  fi
}

stop_processes() { # DIR [NAME...]
  # kube-apiserver first: it hangs in shutdown if etcd is already gone
  local dir=$1 name pid
  shift
  local names=("$@")
  ((${#names[@]})) || names=(kube-apiserver etcd)
  for name in "${names[@]}"; do
    pid=$(our_pid "$dir" "$name")
    if [[ -n $pid ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do
        pid_alive "$pid" || break
        sleep 0.1
      done
      if pid_alive "$pid"; then
        log "$name (pid $pid) ignored SIGTERM for 15s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
      fi
    fi
    rm -f "$dir/$name.pid"
  done
}

# ---------------------------------------------------------------- RBAC
# The chart's default for apiPriority.KEY (values.yaml), quotes dropped.
api_priority_value() { # KEY
  awk -v key="$1:" '/^apiPriority:/ { f = 1; next } f && /^[^ #]/ { f = 0 } f && $1 == key { gsub(/"/, "", $2); print $2; exit }' "$CHART_VALUES_FILE"
}

apply_rbac() { # DIR
  local dir=$1 kc=$1/admin.kubeconfig
  [[ -f $kc ]] || die "$kc not found; is DIR a control plane started by '$0 start'?"
  [[ -f $RBAC_RULES_FILE ]] || die "RBAC rules file $RBAC_RULES_FILE not found"
  local rules
  # the file is a plain YAML list of PolicyRule objects; indent it under "rules:"
  rules=$(grep -vE '^(---|\.\.\.)[[:space:]]*$' "$RBAC_RULES_FILE" | sed 's/^/  /')
  kubectl --kubeconfig="$kc" apply --server-side --force-conflicts \
    --field-manager=taint-operator-e2e -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $OPERATOR_NAMESPACE
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: taint-operator
rules:
$rules
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: taint-operator
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: taint-operator
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: $OPERATOR_USER
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: taint-operator-leader-election
  namespace: $OPERATOR_NAMESPACE
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: taint-operator-leader-election
  namespace: $OPERATOR_NAMESPACE
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: taint-operator-leader-election
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: $OPERATOR_USER
EOF
  # API Priority and Fairness: the chart puts the operator's ServiceAccount at the
  # priority level its values name (apiPriority.priorityLevel); here the same
  # level serves the operator's user. Otherwise a plain user lands in
  # global-default, whose 49 seats are fewer than the operator's workers.
  local level
  level=$(api_priority_value priorityLevel)
  if [[ -n $level ]]; then
    kubectl --kubeconfig="$kc" apply --server-side --force-conflicts \
      --field-manager=taint-operator-e2e -f - >/dev/null <<EOF
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: taint-operator
spec:
  priorityLevelConfiguration:
    name: $level
  matchingPrecedence: 1000
  distinguisherMethod:
    type: ByUser
  rules:
  - subjects:
    - kind: User
      user:
        name: $OPERATOR_USER
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      namespaces: ["*"]
      clusterScope: true
EOF
    log "API priority: user $OPERATOR_USER served at priority level $level (FlowSchema taint-operator)"
  fi
  # The Lease at a level of its own, matched first, as the chart does
  # (apiPriority.leaderElectionPriorityLevel).
  local lease_level
  lease_level=$(api_priority_value leaderElectionPriorityLevel)
  if [[ -n $lease_level ]]; then
    kubectl --kubeconfig="$kc" apply --server-side --force-conflicts \
      --field-manager=taint-operator-e2e -f - >/dev/null <<EOF
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: taint-operator-leader-election
spec:
  priorityLevelConfiguration:
    name: $lease_level
  matchingPrecedence: 999
  distinguisherMethod:
    type: ByUser
  rules:
  - subjects:
    - kind: User
      user:
        name: $OPERATOR_USER
    resourceRules:
    - verbs: ["get", "create", "update"]
      apiGroups: ["coordination.k8s.io"]
      resources: ["leases"]
      namespaces: ["$OPERATOR_NAMESPACE"]
EOF
    log "API priority: user $OPERATOR_USER's Leases in $OPERATOR_NAMESPACE at priority level $lease_level (FlowSchema taint-operator-leader-election)"
  fi
  log "RBAC applied: ClusterRole taint-operator (from ${RBAC_RULES_FILE#"$REPO_ROOT"/}), Role $OPERATOR_NAMESPACE/taint-operator-leader-election, both bound to user $OPERATOR_USER"
}

# ---------------------------------------------------------------- commands
on_start_exit() {
  local rc=$?
  if ((rc != 0)); then
    log "start failed; logs kept in $START_DIR"
    stop_processes "$START_DIR"
  fi
}

cmd_start() {
  local dir=$1
  check_binaries
  need_tool openssl "certificate generation"
  need_tool kubectl "readiness checks and RBAC"
  need_tool curl "health checks"
  if [[ -e $dir && -n $(ls -A "$dir" 2>/dev/null) ]]; then
    die "$dir exists and is not empty; stop it first ('$0 stop $dir') or pick another DIR"
  fi
  dir=$(abspath "$dir")
  touch "$dir/$MARKER"
  local t0=$SECONDS

  # on any failure: stop what we started, keep DIR for the logs
  START_DIR=$dir
  trap on_start_exit EXIT

  gen_certs "$dir"
  start_etcd "$dir"
  start_apiserver "$dir"
  write_kubeconfig "$dir/operator.kubeconfig" "$OPERATOR_USER" "$dir/pki/operator.crt" "$dir/pki/operator.key" "$APISERVER_URL" "$dir/pki"

  # the system namespaces (default, kube-system, ...) are created right after startup
  local _
  for _ in $(seq 1 60); do
    kubectl --kubeconfig="$dir/admin.kubeconfig" get ns kube-system default >/dev/null 2>&1 && break
    sleep 0.5
  done
  apply_rbac "$dir"

  cat >"$dir/env" <<EOF
export KUBECONFIG=$dir/admin.kubeconfig
export OPERATOR_KUBECONFIG=$dir/operator.kubeconfig
export OPERATOR_NAMESPACE=$OPERATOR_NAMESPACE
export KUBE_APISERVER_URL=$APISERVER_URL
export ETCD_ENDPOINT=http://127.0.0.1:$ETCD_PORT
export ETCD_PEER_PORT=$ETCD_PEER_PORT
export CONTROL_PLANE_DIR=$dir
EOF
  trap - EXIT
  cat <<EOF
control plane ready in $((SECONDS - t0))s
  kube-apiserver   $APISERVER_URL (pid $(cat "$dir/kube-apiserver.pid"), log $dir/kube-apiserver.log)
  etcd             http://127.0.0.1:$ETCD_PORT (pid $(cat "$dir/etcd.pid"), log $dir/etcd.log)
  admin            $dir/admin.kubeconfig (group system:masters)
  operator         $dir/operator.kubeconfig (user $OPERATOR_USER, RBAC from chart; leases in ns $OPERATOR_NAMESPACE)
  env              source $dir/env
  stop             $0 stop $dir
EOF
}

cmd_stop() {
  local dir=$1
  if [[ ! -d $dir ]]; then
    log "$dir does not exist; nothing to stop"
    return 0
  fi
  dir=$(cd "$dir" && pwd)
  stop_processes "$dir"
  if [[ ${KEEP:-0} == 1 ]]; then
    log "stopped; KEEP=1, leaving $dir"
  elif [[ -f $dir/$MARKER ]]; then
    rm -rf "$dir"
    log "stopped; removed $dir"
  else
    log "stopped; $dir has no $MARKER marker, not removing it"
  fi
}

# Restarts one process of a running control plane on the same ports (and, for
# etcd, the same data): what a test of the operator's watches needs.
cmd_restart() { # DIR kube-apiserver|etcd
  local dir=$1 name=$2
  [[ -f $dir/env ]] || die "no control plane in $dir"
  dir=$(cd "$dir" && pwd)
  check_binaries
  # shellcheck disable=SC1091
  . "$dir/env"
  APISERVER_URL=$KUBE_APISERVER_URL
  APISERVER_PORT=${KUBE_APISERVER_URL##*:}
  ETCD_PORT=${ETCD_ENDPOINT##*:}
  local t0=$SECONDS
  stop_processes "$dir" "$name"
  case $name in
    kube-apiserver) start_apiserver "$dir" restart ;;
    etcd)
      [[ -n ${ETCD_PEER_PORT:-} ]] || die "cannot tell etcd's peer port (a control plane started by an older script)"
      start_etcd "$dir" restart
      ;;
  esac
  log "$name restarted in $((SECONDS - t0))s"
}

cmd_status() {
  local dir=$1
  [[ -f $dir/admin.kubeconfig ]] || { log "no control plane in $dir"; return 1; }
  [[ $(kubectl --kubeconfig="$dir/admin.kubeconfig" get --raw=/readyz --request-timeout=5s 2>/dev/null) == ok ]] \
    || { log "kube-apiserver in $dir is not ready"; return 1; }
  log "ready: $(grep KUBE_APISERVER_URL "$dir/env" 2>/dev/null | cut -d= -f2)"
}

[[ $# -eq 2 ]] || usage
case $1 in
  start) cmd_start "$2" ;;
  restart-apiserver) cmd_restart "$2" kube-apiserver ;;
  restart-etcd) cmd_restart "$2" etcd ;;
  stop) cmd_stop "$2" ;;
  rbac)
    need_tool kubectl "applying RBAC"
    [[ -d $2 ]] || die "$2 does not exist"
    apply_rbac "$(cd "$2" && pwd)"
    ;;
  status) need_tool kubectl "readiness check"; cmd_status "$2" ;;
  *) usage ;;
esac
