#!/usr/bin/env bash
# Three wasm-apiserver replicas on a three-member etcd cluster, all on
# loopback, sharing one PKI so that one kubeconfig reaches every replica.
#
#   examples/three-replicas.sh [WORKDIR]
#
# What it starts (ports can be changed with the variables below):
#   etcd n1, n2, n3     clients on 2379, 22379, 32379; peers on 2380, 22380, 32380
#   replica 1, 2, 3     HTTPS on 6443, 6444, 6445, all with
#                       --etcd-servers http://127.0.0.1:2379,...:22379,...:32379
#
# Replica 1 creates the cluster CA, the serving certificate and the admin
# client certificate in WORKDIR/replica-1/pki/. Replicas 2 and 3 serve that
# same certificate (--tls-cert-file/--tls-private-key-file) and trust client
# certificates of that CA (--client-ca-file), so WORKDIR/kubeconfig, with one
# context per replica, works against all three; they also sign and verify
# ServiceAccount tokens with its key (--service-account-signing-key-file), so a
# `kubectl create token` through one replica works on all three. (Their own
# replica-N/admin.kubeconfig names their own, unused CA: use WORKDIR/kubeconfig.)
#
# Ctrl-C (or SIGTERM) stops the replicas, then etcd. Without WORKDIR the
# script uses a fresh temp dir and removes it after Ctrl-C (kept if something
# failed, for its logs); with WORKDIR the data stays, and running the script
# again on it restarts the same cluster.
#
# Environment:
#   WASM_APISERVER    server binary to run; default: build it with
#                     `cargo build -p wasm-apiserver --features etcd` (add
#                     RELEASE=1 for --release) and use the one in target/
#   ETCD_CLIENT_PORTS default "2379 22379 32379"
#   ETCD_PEER_PORTS   default "2380 22380 32380"
#   APISERVER_PORTS   default "6443 6444 6445"
#
# Needs `etcd` on PATH (and `protoc` to build the etcd feature): run
# scripts/install-etcd-deps.sh (as root) first. Needs curl for readiness probes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
read -r -a etcd_ports <<<"${ETCD_CLIENT_PORTS:-2379 22379 32379}"
read -r -a peer_ports <<<"${ETCD_PEER_PORTS:-2380 22380 32380}"
read -r -a api_ports <<<"${APISERVER_PORTS:-6443 6444 6445}"

for tool in etcd curl setsid; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "three-replicas.sh: \`$tool\` not found (for etcd: run scripts/install-etcd-deps.sh as root)" >&2
        exit 1
    fi
done

if [ -z "${WASM_APISERVER:-}" ]; then
    profile=debug
    flags=()
    if [ -n "${RELEASE:-}" ]; then
        profile=release
        flags=(--release)
    fi
    echo "building wasm-apiserver with the etcd feature ($profile)..." >&2
    (cd "$root" && cargo build -p wasm-apiserver --features etcd "${flags[@]}")
    WASM_APISERVER="${CARGO_TARGET_DIR:-$root/target}/$profile/wasm-apiserver"
fi

# The server wants absolute paths (its plugin cache dir must be absolute).
if [ -n "${1:-}" ]; then
    mkdir -p "$1"
    work="$(cd "$1" && pwd)"
    remove_work=
else
    work="$(mktemp -d "${TMPDIR:-/tmp}/wasm-apiserver-3r.XXXXXX")"
    remove_work=1
fi

pids=()
interrupted=
on_signal() {
    interrupted=1
    exit 0 # runs `stop` (the EXIT trap)
}
stop() {
    local status=$?
    trap - INT TERM EXIT
    echo
    echo "stopping..." >&2
    # In reverse start order, each with SIGTERM (a graceful shutdown) and
    # waited for: the replicas, then etcd. The pids are exactly the
    # processes this script started.
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[$i]}" 2>/dev/null || true
        wait "${pids[$i]}" 2>/dev/null || true
    done
    # A temp dir goes after a Ctrl-C; after a failure its logs are kept.
    if [ -n "$remove_work" ] && [ -n "$interrupted" ]; then
        rm -rf "$work"
    else
        echo "data and logs kept in $work" >&2
    fi
    exit "$status"
}
trap on_signal INT TERM
trap stop EXIT

# Polls `check ARGS...` every 0.1 s for up to 60 s; fails with `what`.
wait_for() {
    local what=$1
    shift
    for _ in $(seq 600); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    echo "three-replicas.sh: timed out waiting for $what" >&2
    return 1
}

etcd_healthy() {
    curl -sf --max-time 1 "http://127.0.0.1:$1/health" | grep -q '"health":"true"'
}

replica_ready() {
    local pki="$work/replica-1/pki"
    curl -sf --max-time 2 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
        "https://127.0.0.1:$1/readyz"
}

# --- etcd -------------------------------------------------------------------
initial_cluster=""
for i in 0 1 2; do
    initial_cluster+="${initial_cluster:+,}n$((i + 1))=http://127.0.0.1:${peer_ports[$i]}"
done
servers=""
for i in 0 1 2; do
    name="n$((i + 1))"
    client="http://127.0.0.1:${etcd_ports[$i]}"
    peer="http://127.0.0.1:${peer_ports[$i]}"
    servers+="${servers:+,}$client"
    # setsid: a Ctrl-C in the terminal reaches only this script, which then
    # stops everything in order. --backend-batch-interval: etcd 3.4 copies
    # its uncommitted write buffer on every write transaction (every create
    # and update is one; etcd-io/etcd#12896, fixed in 3.5), so committing
    # every 10 ms instead of 100 ms keeps that buffer small: about 2x the
    # creates/s on a busy 2-core machine (`cargo bench ... -- etcd`).
    setsid etcd --name "$name" --data-dir "$work/etcd-$name" \
        --backend-batch-interval=10ms \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$initial_cluster" --initial-cluster-state new \
        --initial-cluster-token wasm-apiserver-example \
        --logger zap --log-level warn >>"$work/etcd-$name.log" 2>&1 &
    pids+=($!)
done
for i in 0 1 2; do
    wait_for "etcd n$((i + 1)) (log: $work/etcd-n$((i + 1)).log)" etcd_healthy "${etcd_ports[$i]}"
done
echo "etcd cluster up: $servers" >&2

# --- replicas ---------------------------------------------------------------
start_replica() {
    local n=$1
    shift
    local dir="$work/replica-$n"
    mkdir -p "$dir"
    rm -f "$dir/admin.kubeconfig"
    setsid "$WASM_APISERVER" serve --data-dir "$dir" \
        --bind-address 127.0.0.1 --secure-port "${api_ports[$((n - 1))]}" \
        --etcd-servers "$servers" "$@" >>"$work/replica-$n.log" 2>&1 &
    pids+=($!)
    # The kubeconfig appears once the replica serves.
    wait_for "replica $n (log: $work/replica-$n.log)" test -f "$dir/admin.kubeconfig"
}

start_replica 1
pki="$work/replica-1/pki"
for n in 2 3; do
    start_replica "$n" \
        --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
        --client-ca-file "$pki/ca.crt" \
        --service-account-signing-key-file "$pki/sa.key"
done
for n in 1 2 3; do
    wait_for "replica $n /readyz (log: $work/replica-$n.log)" replica_ready "${api_ports[$((n - 1))]}"
done

# --- one kubeconfig, a context per replica ---------------------------------
field() { awk -v f="$1:" '$1 == f { print $2; exit }' "$work/replica-1/admin.kubeconfig"; }
ca="$(field certificate-authority-data)"
cert="$(field client-certificate-data)"
key="$(field client-key-data)"
{
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    for n in 1 2 3; do
        echo "- name: replica-$n"
        echo "  cluster:"
        echo "    server: https://127.0.0.1:${api_ports[$((n - 1))]}"
        echo "    certificate-authority-data: $ca"
    done
    echo "contexts:"
    for n in 1 2 3; do
        echo "- name: replica-$n"
        echo "  context: {cluster: replica-$n, user: admin, namespace: default}"
    done
    echo "current-context: replica-1"
    echo "users:"
    echo "- name: admin"
    echo "  user:"
    echo "    client-certificate-data: $cert"
    echo "    client-key-data: $key"
} >"$work/kubeconfig"
chmod 600 "$work/kubeconfig"

cat <<EOF

Three wasm-apiserver replicas on one etcd cluster are running.

  export KUBECONFIG=$work/kubeconfig
  kubectl --context replica-1 create configmap demo --from-literal=k=v
  kubectl --context replica-2 get configmap demo
  kubectl --context replica-3 get configmaps -w        # then change demo via another replica

  replicas: https://127.0.0.1:${api_ports[0]}  https://127.0.0.1:${api_ports[1]}  https://127.0.0.1:${api_ports[2]}
  etcd:     $servers
  logs:     $work/replica-{1,2,3}.log  $work/etcd-n{1,2,3}.log

Press Ctrl-C to stop everything.
EOF

# Until Ctrl-C, or until one of the processes exits on its own.
set +e
wait -n "${pids[@]}"
status=$?
echo "three-replicas.sh: a process exited (status $status); see the logs in $work" >&2
exit "$status"
