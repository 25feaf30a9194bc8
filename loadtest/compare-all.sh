#!/usr/bin/env bash
# Runs every scenario against every target the machine has (Herald over TCP and long-poll, nats-server,
# redis-server, SignalR over WebSockets and long polling), one after the other, each server started by
# the tool and stopped after its run. Writes loadtest/results/<name>.{json,md} and the broadcast chart.
# This is what produced the tables in loadtest/README.md. About 90 minutes on a 2-core machine.
# Usage: loadtest/compare-all.sh [name ...]   (names: fanout rpc1 rpc32 rpc-composite rpc-list42
#        rpc-oneway stream collab collab-1000x2 connections broadcast; default: all)
set -u
cd "$(dirname "$0")/.."
dotnet build -c Release broker/src/Herald.Broker >/dev/null && dotnet build -c Release loadtest/Herald.LoadTest >/dev/null || exit 1
LT="dotnet loadtest/Herald.LoadTest/bin/Release/net10.0/Herald.LoadTest.dll"
R=loadtest/results
ALL="herald/tcp,herald/longpoll,nats/tcp,redis/tcp,signalr/websockets,signalr/longpolling"
run() { # name, then the compare arguments
  local name=$1; shift
  echo "=== $name: compare $* ($(date -u +%H:%M:%S))"
  $LT compare "$@" --out "$R/$name.json" --markdown "$R/$name.md" > "$R/$name.log" 2>&1
  echo "    exit $? ($(date -u +%H:%M:%S))"; cat "$R/$name.md" 2>/dev/null
}
want() { [ $# -eq 0 ] && return 0; return 1; }
names=("$@")
pick() { [ ${#names[@]} -eq 0 ] && return 0; for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }

pick fanout        && run fanout        fanout --targets $ALL --subscribers 100 --payload 128 --seconds 10 --repeat 3
pick rpc1          && run rpc1          rpc --targets $ALL --callers 1 --payload small --seconds 10 --repeat 3
pick rpc32         && run rpc32         rpc --targets $ALL --callers 32 --payload small --seconds 10 --repeat 3
pick rpc-composite && run rpc-composite rpc --callers 1 --payload composite --seconds 5 --repeat 3
pick rpc-list42    && run rpc-list42    rpc --callers 1 --payload list42 --seconds 5 --repeat 3
pick rpc-oneway    && run rpc-oneway    rpc --mode oneway --callers 1 --payload small --seconds 5 --repeat 3
pick stream        && run stream        stream --targets $ALL --messages 4000000 --warmup 1000000 --repeat 3 --max-seconds 90
pick collab        && run collab        collab --targets $ALL --preset 100x5-d1
pick collab-1000x2 && run collab-1000x2 collab --preset 1000x2-d5 --rounds 20
if pick connections; then
  run connections connections --targets herald/tcp,herald/longpoll,nats/tcp --max limit --start 2000
  # Redis and SignalR clients cost the tool far more memory each (a StackExchange.Redis multiplexer per
  # client ran the tool out of memory at 16,000): stepped to 8,000.
  run connections-capped connections --targets redis/tcp,signalr/websockets,signalr/longpolling --steps 2000,4000,8000
fi
if pick broadcast; then
  # One target at a time, each with its own result file for the chart; Redis and SignalR capped by the
  # tool's memory per client (see connections).
  B="broadcast --periods 1 --search --start 1000 --bursts 20 --max-seconds 200"
  for t in "herald tcp" "herald longpoll" "nats tcp" "redis tcp --max-subscribers 9000" "signalr tcp --max-subscribers 12000"; do
    set -- $t; name="broadcast-$1-$2"; target=$1; transport=$2; shift 2
    echo "=== $name ($(date -u +%H:%M:%S))"
    $LT $B --target $target --transport $transport "$@" --out $R/$name.json > $R/$name.log 2>&1
    echo "    exit $?"; grep -E "HEADLINE" $R/$name.log
  done
  $LT chart --in $R/broadcast-herald-tcp.json,$R/broadcast-herald-longpoll.json,$R/broadcast-nats-tcp.json,$R/broadcast-redis-tcp.json,$R/broadcast-signalr-tcp.json --out $R/broadcast-chart
fi
