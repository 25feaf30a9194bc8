#!/usr/bin/env bash
# The runs behind README's performance tables. Each row is one `compare` run with every target side by side
# (Herald over TCP, WebSocket and long-poll, nats-server, redis-server, SignalR over WebSockets: the tool
# starts each server, runs the row against it, stops it), then Herald over TCP again with isolation on
# (versus.sh's ISOLATION_ENV); then loadtest/readme-tables.py rewrites README's tables from the files.
# Writes $OUT/<row>.json and $OUT/<row>-isolation.json (the compare result: every target's figures,
# repetitions, versions, command line, machine and load average) with a .log beside each.
#
# Usage: loadtest/compare-all.sh [row ...]   rows: fanout stream oneway rpc32 rpc1 collab idle (default: all)
#          and, never by default, broadcast: each target's broadcast search (P = 1 s) and the broadcast chart,
#          about 15 minutes more.
#        Environment: OUT (loadtest/results/readme, the folder README's tables name; elsewhere README is left
#          alone), REPEAT (2), SHORT (1: versus.sh's short windows, about 20 minutes on a 2-core machine in all;
#          0: the full windows, about an hour), BASELINE (versus.sh).
# Commit the result files with README: `loadtest/readme-tables.py --check` (a load-tool test) fails when
# README's tables are not what the committed files give.
OUT=${OUT:-loadtest/results/readme}
REPEAT=${REPEAT:-2}
SHORT=${SHORT:-1}
[ $# -eq 0 ] && set -- fanout stream oneway rpc32 rpc1 collab idle
source "$(dirname "$0")/versus.sh" "$@"
ALL=herald/tcp,herald/websocket,herald/longpoll,nats/tcp,redis/tcp,signalr/websockets

for name in fanout stream oneway rpc32 rpc1 collab idle; do
  chosen "$name" || continue
  RUN_ENV=()
  run_compare "$name" "${SCENARIO[$name]}" "$ALL"
  [ "$name" = idle ] && continue # no permission check on an idle connection's path
  RUN_ENV=("${ISOLATION_ENV[@]}")
  # shellcheck disable=SC2046
  run_compare "$name-isolation" "${SCENARIO[$name]}" herald/tcp $(isolation_args "${SCENARIO[$name]}")
done

if chosen broadcast; then # only when named: the default list above leaves it out
  # One target at a time, each with its own result file for the chart; Redis and SignalR capped by the
  # tool's memory per client (a StackExchange.Redis multiplexer or SignalR client per subscriber).
  B="broadcast --periods 1 --search --start 1000 --bursts 20 --max-seconds 200"
  for t in "herald tcp" "herald longpoll" "nats tcp" "redis tcp --max-subscribers 9000" "signalr tcp --max-subscribers 12000"; do
    set -- $t; name="broadcast-$1-$2"; target=$1; transport=$2; shift 2
    echo "=== $name ($(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/'))"
    $LT $B --target $target --transport $transport "$@" "${PORTS[@]}" --out $OUT/$name.json > $OUT/$name.log 2>&1
    echo "    exit $?"; grep -E "HEADLINE" $OUT/$name.log
  done
  $LT chart --in $OUT/broadcast-herald-tcp.json,$OUT/broadcast-herald-longpoll.json,$OUT/broadcast-nats-tcp.json,$OUT/broadcast-redis-tcp.json,$OUT/broadcast-signalr-tcp.json --out $OUT/broadcast-chart
fi

if [ "$OUT" = loadtest/results/readme ]; then
  python3 loadtest/readme-tables.py
else
  echo "results in $OUT; README's tables from them: python3 loadtest/readme-tables.py --results $OUT --readme COPY.md"
fi
