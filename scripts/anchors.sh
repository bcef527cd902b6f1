# Sourced by scripts/bench.sh and scripts/failover.sh: the anchor (a 3-member etcd
# cluster, Debian's etcd-server) and holdfast playgrounds, started on loopback under
# "$work", their pids appended to "pids", all stopped and removed on exit. Both scripts
# measure the two side by side, in the same run, on this machine.

# A scratch directory "$work" and the list "pids" of everything started in it: on exit
# every process is asked to stop (TERM, then KILL 3 s later) and the directory goes.
work="$(mktemp -d /tmp/holdfast-anchors.XXXXXX)"
pids=()
anchors_cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 3
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap anchors_cleanup EXIT

# Installs etcd, etcdctl and protoc (the etcd client's build dependency) if missing.
anchors_install() {
    local need=()
    command -v etcd >/dev/null || need+=(etcd-server)
    # etcdctl: health checks and finding etcd's leader.
    command -v etcdctl >/dev/null || need+=(etcd-client)
    command -v protoc >/dev/null || need+=(protobuf-compiler)
    # openssl: the certificates of the etcd that runs over mutual TLS.
    command -v openssl >/dev/null || need+=(openssl)
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
    fi
}

# Optimized builds of both sides' clients and of the holdfast server (the `perf`
# profile is release without debug info; its RocksDB build takes 15-20 min once);
# sets "bin" to where they are.
anchors_build() {
    cargo build --profile perf --locked -p holdfast -p holdfast-bench --features holdfast-bench/etcd
    bin="$CARGO_TARGET_DIR/perf"
}

etcd_initial="e1=http://127.0.0.1:21380,e2=http://127.0.0.1:22380,e3=http://127.0.0.1:23380"
etcd_eps="127.0.0.1:21379,127.0.0.1:22379,127.0.0.1:23379"
declare -A etcd_pid

# Starts etcd member $1 (1..3); $2 = new | existing.
start_etcd_member() {
    local i=$1 state=$2
    etcd --name "e$i" --data-dir "$work/etcd-$i" \
        --listen-client-urls "http://127.0.0.1:2${i}379" --advertise-client-urls "http://127.0.0.1:2${i}379" \
        --listen-peer-urls "http://127.0.0.1:2${i}380" --initial-advertise-peer-urls "http://127.0.0.1:2${i}380" \
        --initial-cluster "$etcd_initial" --initial-cluster-state "$state" --initial-cluster-token holdfast-bench \
        --log-level warn >>"$work/etcd-$i.log" 2>&1 &
    etcd_pid[$i]=$!
    pids+=($!)
}

start_etcd() {
    echo "== etcd $(etcd --version | head -1 | awk '{print $3}'): 3 members on loopback"
    for i in 1 2 3; do start_etcd_member "$i" new; done
    for _ in $(seq 60); do
        ETCDCTL_API=3 etcdctl --endpoints "$etcd_eps" endpoint health >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "etcd did not become healthy" >&2
    return 1
}

# etcd as deployed: a second 3-member cluster on ports 3x379/3x380, mutual TLS between
# its members and with its clients (client certificates required), certificates from
# a throwaway CA in "$work/etcd-certs" (ca.crt, client.crt, client.key for the bench).
etcd_tls_initial="t1=https://127.0.0.1:31380,t2=https://127.0.0.1:32380,t3=https://127.0.0.1:33380"
etcd_tls_eps="https://127.0.0.1:31379,https://127.0.0.1:32379,https://127.0.0.1:33379"
etcd_tls_certs() {
    local d="$work/etcd-certs" ext="$work/etcd-certs/ext.cnf"
    mkdir -p "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=etcd-bench-ca \
        -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
    local n
    for n in member client; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$n" \
            -keyout "$d/$n.key" -out "$d/$n.csr" 2>/dev/null
        openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
            -extfile "$ext" -out "$d/$n.crt" 2>/dev/null
    done
}

start_etcd_tls() {
    echo "== etcd over mutual TLS: 3 members on loopback"
    etcd_tls_certs
    local i c="$work/etcd-certs"
    for i in 1 2 3; do
        etcd --name "t$i" --data-dir "$work/etcd-tls-$i" \
            --listen-client-urls "https://127.0.0.1:3${i}379" --advertise-client-urls "https://127.0.0.1:3${i}379" \
            --listen-peer-urls "https://127.0.0.1:3${i}380" --initial-advertise-peer-urls "https://127.0.0.1:3${i}380" \
            --initial-cluster "$etcd_tls_initial" --initial-cluster-state new --initial-cluster-token holdfast-bench-tls \
            --cert-file "$c/member.crt" --key-file "$c/member.key" --trusted-ca-file "$c/ca.crt" --client-cert-auth \
            --peer-cert-file "$c/member.crt" --peer-key-file "$c/member.key" --peer-trusted-ca-file "$c/ca.crt" --peer-client-cert-auth \
            --log-level warn >>"$work/etcd-tls-$i.log" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 60); do
        ETCDCTL_API=3 etcdctl --endpoints "$etcd_tls_eps" --cacert "$c/ca.crt" --cert "$c/client.crt" --key "$c/client.key" \
            endpoint health >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "etcd over TLS did not become healthy" >&2
    tail -5 "$work/etcd-tls-1.log" >&2
    return 1
}

# The member (1..3) that leads etcd, or nothing.
etcd_leader() {
    local i st
    for i in 1 2 3; do
        st=$(ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:2${i}379" --command-timeout=1s endpoint status -w json 2>/dev/null) || continue
        if python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; sys.exit(0 if s["leader"]==s["header"]["member_id"] else 1)' <<<"$st"; then
            echo "$i"
            return 0
        fi
    done
}

# Starts a one-region holdfast playground (a registry voter, a 3-node cell, a gateway)
# named $1 on ports from $2, and sets it up for holdfast-bench (the namespace `bench`,
# its shards on the cell); further arguments go to `holdfast dev`. Its certificates are
# in "$work/$1/certs" unless --insecure was given.
start_holdfast() {
    local name=$1 port=$2; shift 2
    echo "== holdfast ($name): one region on loopback, ports from $port"
    "$bin/holdfast" dev --regions 1 --base-port "$port" --data-dir "$work/$name" "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 240); do [ -f "$work/$name/endpoints.json" ] && break; sleep 0.5; done
    [ -f "$work/$name/endpoints.json" ] || { tail -20 "$work/$name.log"; return 1; }
    local certs=(--certs-dir "$work/$name/certs")
    if [[ " $* " == *" --insecure "* ]]; then certs=(); fi
    "$bin/holdfast-bench" setup --endpoints "127.0.0.1:$port" --cell east-1 "${certs[@]}"
}
