#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the store tests: data and socket folders in a temp dir,
# listening on 127.0.0.1 only, on a free port, with trust auth for local test users.
#
#   tools/pg_cluster.sh start     install PostgreSQL from Debian if missing, initdb, start;
#                                 prints `export AGENTKIT_TEST_PG_DSN=...`
#   tools/pg_cluster.sh env       prints the export line of the running cluster
#   tools/pg_cluster.sh restart   restart the server (same data): the tests' connection loss
#   tools/pg_cluster.sh down|up   stop / start the server, keeping its data: "server down"
#   tools/pg_cluster.sh stop      stop the server and delete everything it made
#
# Usage in a shell: eval "$(tools/pg_cluster.sh start)"; ...; tools/pg_cluster.sh stop
# initdb refuses to run as root, so as root the cluster belongs to the `postgres` user.
# The state (folders, port) is kept in $AGENTKIT_PG_STATE, by default a file in the temp dir
# named after this checkout, so several checkouts never share a cluster.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="${TMPDIR:-/tmp}"
state="${AGENTKIT_PG_STATE:-$tmp/agentkit-pg-$(printf %s "$repo" | md5sum | cut -c1-12).env}"

say() { echo "pg_cluster: $*" >&2; }

find_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
    done
    return 1
}

install_postgres() {
    if find_bin >/dev/null; then return 0; fi
    if [ "$(id -u)" != 0 ]; then
        say "PostgreSQL is not installed and installing it needs root (apt-get install postgresql)"
        exit 1
    fi
    say "installing PostgreSQL from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    find_bin >/dev/null || { say "postgresql installed, but no initdb found"; exit 1; }
}

# Run a PostgreSQL program as the cluster's owner (the postgres user when we are root).
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    local py
    py="$(command -v python3 || command -v python)"
    "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

load_state() {
    if [ ! -f "$state" ]; then say "no cluster running (no $state); run: $0 start"; exit 1; fi
    # shellcheck disable=SC1090
    . "$state"
}

print_env() {
    echo "export AGENTKIT_TEST_PG_DSN='$PG_DSN'"
    echo "export AGENTKIT_PG_STATE='$state'"
}

server_start() {
    as_owner "$PG_BIN/pg_ctl" -D "$PG_BASE/data" -l "$PG_BASE/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_BASE/socket" start >/dev/null
}

server_stop() {
    as_owner "$PG_BIN/pg_ctl" -D "$PG_BASE/data" -m fast -w -t 60 stop >/dev/null
}

cmd="${1:-}"
case "$cmd" in
start)
    if [ -f "$state" ]; then
        load_state
        if as_owner "$PG_BIN/pg_ctl" -D "$PG_BASE/data" status >/dev/null 2>&1; then
            say "already running on 127.0.0.1:$PG_PORT"
            print_env
            exit 0
        fi
        rm -rf "$PG_BASE" "$state"
    fi
    install_postgres
    PG_BIN="$(find_bin)"
    PG_BASE="$(mktemp -d "$tmp/agentkit-pg.XXXXXX")"
    mkdir -p "$PG_BASE/socket"
    if [ "$(id -u)" = 0 ]; then chown -R postgres: "$PG_BASE"; fi
    chmod 700 "$PG_BASE"
    as_owner "$PG_BIN/initdb" -D "$PG_BASE/data" -U postgres --auth=trust -E UTF8 \
        --locale=C.UTF-8 >"$PG_BASE/initdb.log" 2>&1 \
        || { cat "$PG_BASE/initdb.log" >&2; exit 1; }
    PG_PORT="$(free_port)"
    {
        echo "PG_BIN='$PG_BIN'"
        echo "PG_BASE='$PG_BASE'"
        echo "PG_PORT='$PG_PORT'"
        echo "PG_DSN='postgresql://postgres@127.0.0.1:$PG_PORT/agentkit_test'"
    } >"$state"
    # shellcheck disable=SC1090
    . "$state"
    server_start || { cat "$PG_BASE/server.log" >&2; exit 1; }
    as_owner "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres agentkit_test
    say "running on 127.0.0.1:$PG_PORT (data in $PG_BASE)"
    print_env
    ;;
env)
    load_state
    print_env
    ;;
restart)
    load_state
    as_owner "$PG_BIN/pg_ctl" -D "$PG_BASE/data" -m fast -w -t 60 restart \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_BASE/socket" >/dev/null
    ;;
down)
    load_state
    server_stop
    ;;
up)
    load_state
    server_start
    ;;
stop)
    if [ ! -f "$state" ]; then say "nothing to stop"; exit 0; fi
    load_state
    server_stop 2>/dev/null || true
    rm -rf "$PG_BASE" "$state"
    say "stopped and removed $PG_BASE"
    ;;
*)
    echo "usage: $0 start|env|restart|down|up|stop" >&2
    exit 2
    ;;
esac
