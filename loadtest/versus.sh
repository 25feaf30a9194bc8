# What the versus-*.sh scripts share (sourced, not run): the Release builds, the tool, the ports, which
# rows the command line chose, and one `compare` run per row and setting. Each script adds its rows and
# prints its table with versus.py (PYTHONPATH=loadtest).
#
# Before sourcing: OUT (the results folder). Reads REPEAT (3) and BASELINE (a Herald.Broker.dll: each Herald
# row also runs this broker just before, an A/B in one run). `source loadtest/versus.sh "$@"` with the
# script's arguments: the rows asked for (none: all).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dotnet build -c Release broker/src/Herald.Broker >/dev/null && dotnet build -c Release loadtest/Herald.LoadTest >/dev/null || exit 1
LT="dotnet loadtest/Herald.LoadTest/bin/Release/net10.0/Herald.LoadTest.dll"
REPEAT=${REPEAT:-3}
mkdir -p "$OUT"
# Ports below the ephemeral range (32768-60999): a listener there can find its port taken by a client socket.
PORTS=(--ports 22502-22534 --http-port 22580 --monitoring-port 22590)
baseline=(); [ -n "${BASELINE:-}" ] && baseline=(--baseline "$BASELINE")
RUN_ENV=() # VAR=value pairs the next run_compare passes to the tool (a broker it starts inherits them)
wanted=("$@")

# Each row's scenario and options, by the row's name: the same wherever a row is run (the tables' labels
# and headlines are versus.py's ROWS).
declare -A SCENARIO=(
  [fanout]="fanout --subscribers 100 --payload 128 --seconds 10 --warmup 5"
  [fanout-tls]="fanout --subscribers 100 --seconds 10 --warmup 10"
  [stream]="stream --messages 4000000 --warmup 1000000 --max-seconds 90"
  [oneway]="rpc --mode oneway --callers 1 --payload small --seconds 5 --warmup 3"
  [rpc32]="rpc --callers 32 --payload small --seconds 5 --warmup 3"
  [rpc1]="rpc --callers 1 --payload small --seconds 5 --warmup 3"
  [collab]="collab --preset 100x5-d1 --rounds 20"
  [idle-tcp]="connections --steps 10000"
  [idle-longpoll]="connections --steps 5000"
  [broadcast]="broadcast --periods 0.1 --search --start 1000 --bursts 20 --max-seconds 200 --max-subscribers 12000"
)

# chosen NAME: whether the command line asked for row NAME (no rows named: every row).
chosen() { [ ${#wanted[@]} -eq 0 ] && return 0; for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

# run_compare STEM "SCENARIO OPTIONS" TARGETS [compare options...]: one compare run, writing $OUT/STEM.json and .log.
run_compare() {
  local stem=$1 scenario=$2 targets=$3; shift 3
  echo "=== $stem: compare $scenario --targets $targets $* ($(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/'))"
  # shellcheck disable=SC2086
  env "${RUN_ENV[@]}" $LT compare $scenario --targets "$targets" "$@" --repeat "$REPEAT" "${PORTS[@]}" "${baseline[@]}" --out "$OUT/$stem.json" > "$OUT/$stem.log" 2>&1
  echo "    exit $?"
}
