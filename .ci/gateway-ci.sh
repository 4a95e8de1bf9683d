#!/usr/bin/env bash
# A real Dask Gateway on this machine for tests: dask-gateway-server with its local-process backend
# (clusters run as the current user) and password authentication.
#   gateway-ci.sh start   starts it in the background and prints the settings a client needs
#   gateway-ci.sh stop    ends the server, its proxy and the clusters it started
# Needs, in the python on PATH: pip install "dask-gateway-server[local]" dask-gateway
# (the local backend also needs sqlalchemy, which [local] brings). Env: GATEWAY_DIR (default
# /tmp/gateway-ci), GATEWAY_PASSWORD (default s3cret), GATEWAY_PORT (default 18124: HTTP API
# and dashboard; PORT+1 carries scheduler traffic, PORT-1 is the server's private API).
# distributed >= 2026 has no `dask-scheduler`/`dask-worker` commands, so the commands are set to
# `dask scheduler`/`dask worker` below. A client: Gateway("http://127.0.0.1:PORT",
# proxy_address="tcp://127.0.0.1:PORT+1", auth=BasicAuth(any_user, password)); a wrong password
# answers 401.
set -u
D=${GATEWAY_DIR:-/tmp/gateway-ci}
PW=${GATEWAY_PASSWORD:-s3cret}
PORT=${GATEWAY_PORT:-18124}
case "${1:-}" in
start)
  mkdir -p "$D"
  cat > "$D/config.py" <<CFG
c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"
c.SimpleAuthenticator.password = "$PW"
c.DaskGateway.address = "127.0.0.1:$((PORT - 1))"
c.Proxy.address = "127.0.0.1:$PORT"
c.Proxy.tcp_address = "127.0.0.1:$((PORT + 1))"
c.LocalClusterConfig.worker_cores = 1
c.LocalClusterConfig.worker_memory = "2 G"
c.LocalClusterConfig.cluster_max_workers = 4
c.ClusterConfig.scheduler_cmd = ["dask", "scheduler"]
c.ClusterConfig.worker_cmd = ["dask", "worker"]
c.ClusterConfig.idle_timeout = 600
CFG
  command -v dask-gateway-server >/dev/null || { echo "dask-gateway-server is not installed in this python" >&2; exit 1; }
  # setsid itself in the background (no subshell around it): $! is then the server's own
  # pid and process group, which `stop` ends, and no shell keeps the caller's stdout open.
  cd "$D"
  setsid dask-gateway-server -f "$D/config.py" > "$D/server.log" 2>&1 < /dev/null &
  echo $! > "$D/server.pid"
  for i in $(seq 60); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/api/health" && break
    sleep 0.5
  done
  curl -s -o /dev/null "http://127.0.0.1:$PORT/api/health" || { echo "gateway did not start; see $D/server.log" >&2; exit 1; }
  echo "export DASK_GATEWAY__ADDRESS=http://127.0.0.1:$PORT"
  echo "export DASK_GATEWAY__PROXY_ADDRESS=tcp://127.0.0.1:$((PORT + 1))"
  echo "export DASK_GATEWAY__AUTH__TYPE=basic"
  echo "export DASK_GATEWAY__AUTH__KWARGS__PASSWORD=$PW"
  ;;
stop)
  if [ -f "$D/server.pid" ]; then
    pg=$(cat "$D/server.pid")
    kill -- -"$pg" 2>/dev/null || kill "$pg" 2>/dev/null
    sleep 1
    kill -9 -- -"$pg" 2>/dev/null
    rm -f "$D/server.pid"
  fi
  ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
