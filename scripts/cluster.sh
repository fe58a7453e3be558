#!/usr/bin/env bash
# cluster.sh — run a local 3-node leasehold cluster on 127.0.0.1.
#
#   bash scripts/cluster.sh start       # builds ./leasehold, starts every node not running yet
#   bash scripts/cluster.sh stop        # stops them (data stays in ./cluster-data)
#   bash scripts/cluster.sh status      # which nodes run, with their pids
#   bash scripts/cluster.sh kill N      # SIGKILL node N (1..3), to watch a failover
#   bash scripts/cluster.sh restart N   # stops node N (if it runs), then starts it
#
# API addresses 127.0.0.1:7431-7433, Raft 127.0.0.1:7531-7533; override with
# LEASEHOLD_CLUSTER_API_PORT / LEASEHOLD_CLUSTER_RAFT_PORT (node 1's port; the
# others follow) and the data with LEASEHOLD_CLUSTER_DIR. Safe to run twice: a
# node that runs is left alone. --bootstrap is given only when no node has a
# data dir yet; a node whose data dir is missing in an existing cluster refuses
# to start (see "A node's disk is lost" in docs/operating/cluster.md). Then:
#   export LEASEHOLD_ENDPOINTS=127.0.0.1:7431,127.0.0.1:7432,127.0.0.1:7433
#   ./leasehold cluster members
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${LEASEHOLD_CLUSTER_DIR:-./cluster-data}
API_PORT=${LEASEHOLD_CLUSTER_API_PORT:-7431}
RAFT_PORT=${LEASEHOLD_CLUSTER_RAFT_PORT:-7531}
NODES=(1 2 3)

api_addr() { echo "127.0.0.1:$((API_PORT + $1 - 1))"; }
raft_addr() { echo "127.0.0.1:$((RAFT_PORT + $1 - 1))"; }

boot_list() {
	local i out=""
	for i in "${NODES[@]}"; do out+="${out:+,}n$i=$(raft_addr "$i")"; done
	echo "$out"
}

# pid_of N prints node N's pid when that process runs leasehold serve.
pid_of() {
	local f="$DIR/n$1.pid" pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	[ -n "$pid" ] && ps -p "$pid" -o args= 2>/dev/null | grep -q "leasehold serve" && echo "$pid"
}

# fresh_cluster: no node has ever stored state here.
fresh_cluster() {
	local i
	for i in "${NODES[@]}"; do [ -d "$DIR/n$i" ] && return 1; done
	return 0
}

build() {
	go build -o ./leasehold.tmp ./cmd/leasehold
	mv ./leasehold.tmp ./leasehold # a rename: running nodes keep their binary
}

start_node() {
	local i=$1 boot=$2 pid
	if pid=$(pid_of "$i"); then
		echo "n$i: already running (pid $pid)"
		return 0
	fi
	mkdir -p "$DIR"
	local args=(serve --node-id "n$i" --listen "$(api_addr "$i")" --raft-addr "$(raft_addr "$i")" --data "$DIR/n$i")
	[ -n "$boot" ] && args+=(--bootstrap "$boot")
	./leasehold "${args[@]}" >>"$DIR/n$i.log" 2>&1 &
	echo $! >"$DIR/n$i.pid"
	echo "n$i: pid $! api $(api_addr "$i") raft $(raft_addr "$i") log $DIR/n$i.log"
}

stop_node() {
	local i=$1 sig=${2:-TERM} pid n
	if pid=$(pid_of "$i"); then
		kill "-$sig" "$pid" 2>/dev/null || true
		for n in $(seq 100); do # up to 10 s
			ps -p "$pid" >/dev/null 2>&1 || break
			sleep 0.1
		done
		if ps -p "$pid" >/dev/null 2>&1; then
			echo "n$i: pid $pid still running after SIG$sig" >&2
			return 1
		fi
		echo "n$i: stopped (pid $pid)"
	fi
	rm -f "$DIR/n$i.pid"
}

need_node() {
	case "${1:-}" in 1 | 2 | 3) ;; *) echo "node number 1..3 required" >&2; exit 2 ;; esac
}

case "${1:-}" in
start)
	boot=""
	fresh_cluster && boot=$(boot_list)
	all_up=true
	for i in "${NODES[@]}"; do pid_of "$i" >/dev/null || all_up=false; done
	$all_up || build
	for i in "${NODES[@]}"; do start_node "$i" "$boot"; done ;;
stop)
	for i in "${NODES[@]}"; do stop_node "$i"; done ;;
status)
	for i in "${NODES[@]}"; do
		if pid=$(pid_of "$i"); then echo "n$i: running (pid $pid) api $(api_addr "$i")"; else echo "n$i: stopped"; fi
	done ;;
kill)
	need_node "${2:-}"
	stop_node "$2" KILL ;;
restart)
	need_node "${2:-}"
	[ -x ./leasehold ] || build
	stop_node "$2"
	start_node "$2" "" ;;
*)
	sed -n '2,19p' "$0"; exit 2 ;;
esac
