#!/usr/bin/env bash
# ci-services.sh — install (when missing) and start the PostgreSQL and Redis servers that the
# fence package's integration tests run against, on loopback, on fixed ports; and install
# (when missing) the chromium, systemd-analyze and podman that the dashboard and deploy tests use,
# and the Debian Python packages the Python client's tests use.
#
# Usage (CI and dev boxes alike):
#
#     eval "$(bash scripts/ci-services.sh)"
#     go test -race ./fence/...
#
# Only the `export LEASEHOLD_TEST_...=...` lines go to stdout; all progress goes to stderr.
# The script is idempotent: a server already answering on its port is reused as it is.
# It runs as root (CI) or as an ordinary user that can run initdb and redis-server.
#
# Environment (all optional):
#   LEASEHOLD_CI_DIR     state directory (data, logs, sockets)   default /var/tmp/leasehold-ci
#   LEASEHOLD_PG_PORT    PostgreSQL port                          default 55432
#   LEASEHOLD_REDIS_PORT Redis port                               default 56379
#
# Stop them again with:
#   runuser -u postgres -- "$PGBIN/pg_ctl" -D "$LEASEHOLD_CI_DIR/pg" stop -m fast   (or without runuser)
#   kill "$(cat "$LEASEHOLD_CI_DIR/redis.pid")"
set -euo pipefail

CI_DIR=${LEASEHOLD_CI_DIR:-/var/tmp/leasehold-ci}
PG_PORT=${LEASEHOLD_PG_PORT:-55432}
REDIS_PORT=${LEASEHOLD_REDIS_PORT:-56379}
HOST=127.0.0.1

log() { printf 'ci-services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

apt_updated=0
apt_install() {
	[ "$(id -u)" -eq 0 ] || die "need root to apt-get install $*"
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=1
	fi
	log "apt-get install $*"
	# policy-rc.d 101 keeps the package's own service from starting on the default port.
	local policy=/usr/sbin/policy-rc.d created_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 || {
		[ "$created_policy" -eq 1 ] && rm -f "$policy"
		die "apt-get install $* failed"
	}
	[ "$created_policy" -eq 1 ] && rm -f "$policy"
	return 0
}

# wait_for NAME SECONDS CMD...: run CMD every 0.2 s until it succeeds, bounded by SECONDS.
wait_for() {
	local name=$1 secs=$2; shift 2
	local tries=$((secs * 5)) i
	for ((i = 0; i < tries; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	die "$name did not accept connections within ${secs}s"
}

mkdir -p "$CI_DIR"
chmod 0755 "$CI_DIR"

# ---------------------------------------------------------------- PostgreSQL
pg_bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [ -z "$d" ] && command -v pg_ctl >/dev/null 2>&1; then d=$(dirname "$(command -v pg_ctl)"); fi
	printf '%s' "$d"
}

PGBIN=$(pg_bindir)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/pg_ctl" ]; then
	apt_install postgresql
	PGBIN=$(pg_bindir)
	[ -x "$PGBIN/pg_ctl" ] || die "pg_ctl not found after installing postgresql"
fi

as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		getent passwd postgres >/dev/null || die "user postgres missing (install postgresql)"
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

PGDATA=$CI_DIR/pg
pg_ready() { "$PGBIN/pg_isready" -q -h "$HOST" -p "$PG_PORT" -d postgres -U postgres; }

# pg_pid_live PID: true if PID is a running, non-zombie postgres process.
pg_pid_live() {
	local pid=$1 stat
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	stat=${stat##*) } # drop "pid (comm) "
	[ "${stat%% *}" != Z ]
}

if pg_ready; then
	log "postgresql already running on $HOST:$PG_PORT"
else
	if [ ! -s "$PGDATA/PG_VERSION" ]; then
		log "initdb $PGDATA"
		mkdir -p "$PGDATA"
		[ "$(id -u)" -eq 0 ] && chown postgres: "$PGDATA"
		chmod 0700 "$PGDATA"
		# trust on loopback only: a throwaway test cluster, never reachable from outside.
		as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 \
			--locale=C.UTF-8 >"$CI_DIR/initdb.log" 2>&1 ||
			as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 \
				--no-locale >"$CI_DIR/initdb.log" 2>&1 ||
			{ cat "$CI_DIR/initdb.log" >&2; die "initdb failed"; }
	fi
	# A postmaster.pid left by a killed server makes postgres refuse to start. It is stale
	# unless its PID is a live (not zombie) postgres process; a live one may still be
	# starting up, so wait for it instead of starting a second one.
	if [ -f "$PGDATA/postmaster.pid" ]; then
		if pg_pid_live "$(head -n 1 "$PGDATA/postmaster.pid")"; then
			log "postgresql process exists but does not answer yet; waiting"
			wait_for postgresql 60 pg_ready
		else
			log "removing stale postmaster.pid"
			rm -f "$PGDATA/postmaster.pid"
		fi
	fi
fi
if ! pg_ready; then
	log "starting postgresql on $HOST:$PG_PORT"
	touch "$CI_DIR/pg.log"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$CI_DIR/pg.log"
	as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$CI_DIR/pg.log" -w -t 60 start \
		-o "-c listen_addresses=$HOST -c port=$PG_PORT -c unix_socket_directories='$PGDATA' -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >&2 ||
		{ tail -n 30 "$CI_DIR/pg.log" >&2; die "pg_ctl start failed"; }
	wait_for postgresql 60 pg_ready
fi

# --------------------------------------------------------------------- Redis
if ! command -v redis-server >/dev/null 2>&1; then
	apt_install redis-server
fi
REDIS_CLI=$(command -v redis-cli || true)

redis_ready() {
	if [ -n "$REDIS_CLI" ]; then
		[ "$("$REDIS_CLI" -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]
	else
		# bash's /dev/tcp: send PING, expect +PONG.
		exec 3<>"/dev/tcp/$HOST/$REDIS_PORT" || return 1
		printf 'PING\r\n' >&3
		local reply
		read -r -t 2 reply <&3 || true
		exec 3>&- 3<&-
		[ "${reply%$'\r'}" = "+PONG" ]
	fi
}

if redis_ready; then
	log "redis already running on $HOST:$REDIS_PORT"
else
	log "starting redis on $HOST:$REDIS_PORT"
	mkdir -p "$CI_DIR/redis"
	redis-server --bind "$HOST" --port "$REDIS_PORT" --daemonize yes \
		--pidfile "$CI_DIR/redis.pid" --logfile "$CI_DIR/redis.log" --dir "$CI_DIR/redis" \
		--save '' --appendonly no --protected-mode yes >&2 ||
		die "redis-server failed to start (see $CI_DIR/redis.log)"
	wait_for redis 30 redis_ready
fi

# ------------------------------------------------- Chromium (dashboard tests)
# internal/web drives the dashboard in a headless Chromium; in CI it fails
# without one. systemd-analyze checks deploy/systemd (the deploy tests).
if ! command -v chromium >/dev/null 2>&1; then
	apt_install chromium
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
	apt_install systemd
fi

# ------------------------------------------ Python (clients/python tests)
# Debian's packages for Debian's python3 (the generated code is committed:
# no protoc needed here).
if ! /usr/bin/python3 -c 'import grpc, google.protobuf, psycopg, redis, pytest, build, venv, pip' >/dev/null 2>&1; then
	apt_install python3-grpcio python3-protobuf python3-psycopg python3-redis python3-pytest python3-build python3-venv python3-pip
fi

# ------------------------------------------------- podman (the container image)
# scripts/image.sh builds the image and the deploy tests run it with podman,
# rootful, with runc and cgroupfs and no ulimits (what works on CI machines).
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
	apt_install podman runc
fi
mkdir -p "$CI_DIR"
cat >"$CI_DIR/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF

printf "export CONTAINERS_CONF='%s'\n" "$CI_DIR/containers.conf"
printf "export LEASEHOLD_TEST_POSTGRES='%s'\n" "postgres://postgres@$HOST:$PG_PORT/postgres?sslmode=disable"
printf "export LEASEHOLD_TEST_REDIS='%s'\n" "redis://$HOST:$REDIS_PORT/0"
