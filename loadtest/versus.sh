# What compare-all.sh and the versus-*.sh scripts share (sourced, not run): the Release builds, the tool, the
# ports, each row's scenario, the isolation-on identities, which rows the command line chose, and one
# `compare` run per row and setting. Each script adds its rows; the versus-*.sh print their table with
# versus.py (PYTHONPATH=loadtest), compare-all.sh regenerates README's with readme-tables.py.
#
# Before sourcing: OUT (the results folder). Reads REPEAT (3), SHORT (0: the full windows) and BASELINE (a Herald.Broker.dll: each Herald
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
# and headlines are versus.py's ROWS). SHORT=1 (compare-all.sh's default) shortens every window so that all
# of README's rows fit in about 20 minutes on 2 cores; the tables' commands say which was used.
if [ "${SHORT:-0}" = 1 ]; then
  fan="--seconds 4 --warmup 2" rpc="--seconds 4 --warmup 2" stream="--messages 1000000 --warmup 250000" rounds=10 idle=2000
else
  fan="--seconds 10 --warmup 5" rpc="--seconds 5 --warmup 3" stream="--messages 4000000 --warmup 1000000" rounds=20 idle=10000
fi
declare -A SCENARIO=(
  [fanout]="fanout --subscribers 100 --payload 128 $fan"
  [fanout-tls]="fanout --subscribers 100 --seconds 10 --warmup 10"
  [stream]="stream $stream --max-seconds 90"
  [oneway]="rpc --mode oneway --callers 1 --payload small $rpc"
  [rpc32]="rpc --callers 32 --payload small $rpc"
  [rpc1]="rpc --callers 1 --payload small $rpc"
  [collab]="collab --preset 100x5-d1 --rounds $rounds"
  [idle]="connections --steps $idle"
  [idle-tcp]="connections --steps 10000"
  [idle-longpoll]="connections --steps 5000"
  [broadcast]="broadcast --periods 0.1 --search --start 1000 --bursts 20 --max-seconds 200 --max-subscribers 12000"
)

# Isolation on (ISOLATION_ENV, for RUN_ENV): Auth:Mode=Token with a client identity and, for request/reply,
# a responder identity (CLIENT_TOKEN, RESPONDER_TOKEN), each restricted to the scenarios' topics, so every
# PUBLISH and SUBSCRIBE is checked against permissions and replies go through another identity's reply
# permission (as in auth-cost.sh). isolation_args SCENARIO: the compare options that connect as them.
CLIENT_TOKEN=versus-nats-client-token
RESPONDER_TOKEN=versus-nats-responder-token
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
ISOLATION_ENV=(
  Herald__Security__Auth__Mode=Token
  Herald__Security__Auth__Tokens__0__Name=client Herald__Security__Auth__Tokens__0__Sha256="$(sha $CLIENT_TOKEN)"
  Herald__Security__Auth__Tokens__1__Name=responder Herald__Security__Auth__Tokens__1__Sha256="$(sha $RESPONDER_TOKEN)"
)
for i in 0 1; do
  j=0
  for topic in 'bench.>' 'stream.>' 'collab.>' 'idle.>'; do
    ISOLATION_ENV+=("Herald__Security__Auth__Tokens__${i}__Permissions__Publish__${j}=$topic" "Herald__Security__Auth__Tokens__${i}__Permissions__Subscribe__${j}=$topic")
    j=$((j + 1))
  done
done
isolation_args() {
  echo --token $CLIENT_TOKEN
  [[ $1 == rpc* && $1 != *oneway* ]] && echo --responder-token $RESPONDER_TOKEN
  return 0
}

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
