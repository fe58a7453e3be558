#!/usr/bin/env bash
# cluster.sh — run a local 3-node leasehold cluster on 127.0.0.1.
#
#   bash scripts/cluster.sh start    # builds ./leasehold, starts n1..n3 in the background
#   bash scripts/cluster.sh stop     # stops them (data stays in ./cluster-data)
#   bash scripts/cluster.sh kill N   # SIGKILL node N (1..3), to watch a failover
#   bash scripts/cluster.sh restart N
#
# API addresses 127.0.0.1:7431-7433, Raft 127.0.0.1:7531-7533. Then:
#   export LEASEHOLD_ENDPOINTS=127.0.0.1:7431,127.0.0.1:7432,127.0.0.1:7433
#   ./leasehold cluster members
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${LEASEHOLD_CLUSTER_DIR:-./cluster-data}
BOOT=n1=127.0.0.1:7531,n2=127.0.0.1:7532,n3=127.0.0.1:7533

start_node() {
	local i=$1
	mkdir -p "$DIR"
	./leasehold serve --node-id "n$i" --listen "127.0.0.1:743$i" --raft-addr "127.0.0.1:753$i" \
		--bootstrap "$BOOT" --data "$DIR/n$i" >>"$DIR/n$i.log" 2>&1 &
	echo $! >"$DIR/n$i.pid"
	echo "n$i: pid $! api 127.0.0.1:743$i raft 127.0.0.1:753$i log $DIR/n$i.log"
}

stop_node() {
	local i=$1 sig=${2:-TERM}
	if [ -f "$DIR/n$i.pid" ]; then
		kill "-$sig" "$(cat "$DIR/n$i.pid")" 2>/dev/null || true
		rm -f "$DIR/n$i.pid"
	fi
}

case "${1:-}" in
start)
	go build -o ./leasehold ./cmd/leasehold
	for i in 1 2 3; do start_node "$i"; done ;;
stop)
	for i in 1 2 3; do stop_node "$i"; done ;;
kill)
	stop_node "${2:?node number}" KILL ;;
restart)
	start_node "${2:?node number}" ;;
*)
	sed -n '2,12p' "$0"; exit 2 ;;
esac
