# Shared by the multi-process benchmark scripts (sourced): the child processes they start, their
# cleanup on exit, and a bounded wait for a server's /health.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap cleanup EXIT
wait_port() {  # bounded: 300 x 0.1 s
  for _ in $(seq 300); do curl -fs "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "port $1 never answered" >&2; return 1
}
