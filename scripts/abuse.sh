#!/usr/bin/env bash
# The abuse script (docs/operating/security.md, "The abuse script"): builds
# leasehold, starts one node on a free 127.0.0.1 port with a temporary data
# dir, and runs scripts/abuse against it: floods from 127.0.0.2 while a
# canary client and fresh clients from 127.0.0.1 measure what a
# well-behaved client sees. One table row per flood; exits non-zero when a
# flood breaks the rule or the canary lost anything it was told.
#
#   bash scripts/abuse.sh           # full form: 30 s per flood, default limits (about 6 minutes)
#   bash scripts/abuse.sh --short   # short form (CI): 4 s per flood, smaller limits (under 2 minutes)
#   bash scripts/abuse.sh --short -only gzip   # one flood
set -euo pipefail
cd "$(dirname "$0")/.."
short=0
args=()
for a in "$@"; do
	case "$a" in
	--short | -short) short=1 ;;
	*) args+=("$a") ;;
	esac
done
# The node's limits: the defaults in the full form. The short form lowers
# the one that a flood could not fill in a few seconds:
# sessions-per-principal (the session flood is refused once the flooder
# holds 200). conns stays at its default in both (the idle-connection flood
# holds twice as many), so that the shares of it that other limits keep
# apply as they would in production.
limits=""
if [ "$short" = 1 ]; then
	limits="sessions-per-principal=200"
	args+=(-short)
fi
# The idle-connection flood needs file descriptors: 8 192 in the driver,
# 4 096 in the node.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

tmp=$(mktemp -d)
pid=""
stop() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 143' INT TERM

go build -o "$tmp/leasehold" ./cmd/leasehold
go build -o "$tmp/abuse" ./scripts/abuse
port=$("$tmp/abuse" -free-port)
addr="127.0.0.1:$port"
echo "abuse.sh: leasehold serve on $addr, limits: ${limits:-defaults}, log in $tmp/serve.log"
"$tmp/leasehold" serve --data "$tmp/data" --listen "$addr" --log-level warn \
	${limits:+--limit "$limits"} >"$tmp/serve.log" 2>&1 &
pid=$!
status=0
"$tmp/abuse" -addr "$addr" ${args[@]+"${args[@]}"} || status=$?
if ! kill -0 "$pid" 2>/dev/null; then
	echo "abuse.sh: the node exited during the run; its log:"
	tail -n 50 "$tmp/serve.log"
	status=1
fi
exit "$status"
