#!/usr/bin/env bash
# The runs behind README's performance tables. Each row is one `compare` run with every target side by side
# (Herald over TCP, WebSocket and long-poll, nats-server, redis-server, SignalR over WebSockets: the tool
# starts each server, runs the row against it, stops it), then Herald over TCP again with isolation on
# (versus.sh's ISOLATION_ENV); then loadtest/readme-tables.py rewrites README's tables from the files.
# Writes $OUT/<row>.json and $OUT/<row>-isolation.json (the compare result: every target's figures,
# repetitions, versions, command line, machine and load average) with a .log beside each.
#
# Then the parts behind README's other generated figures, each writing its own files into $OUT:
#   cluster, cluster-longpoll: "Scaling out"'s two tables. `compare` cannot give each target its own `--nodes`, so each cell is one
#     scenario run (`--target herald`, `cluster --nodes 1`, `cluster --nodes 3`, `redis`, `nats`; the long-poll
#     table the first three over long-poll), the targets of a row one after the other: $OUT/cluster-ROW-TARGET.json
#     (the scenario's result: figures, repetitions, command line, machine, load average) and .log. The tool starts
#     its own redis-server and nodes on loopback. About 7 minutes with SHORT=1.
#   presence: "What presence costs": the presence scenario (plain vs joined subscriptions, memory per member, a
#     10,000-member topic's events and queries) on one node and on a cluster of 3 nodes, each one run:
#     $OUT/presence-TARGET.json and .log. About 8 minutes with REPEAT=3.
#   shards: "Sharding": Redis CPU seconds per million cluster publications on each shard (the `shards` scenario), a
#     cluster of 2 nodes over 1, 2 and 4 redis-servers, one run each: $OUT/shards-S.json and .log. About 3 minutes.
#   api: "From your backend"'s server API table: the api scenario (a TCP publisher, the API one publication per
#     request and in batches of 100, one broker, one run; it takes no --repeat): $OUT/api.json and .log. About a minute.
#   deltas: "Deltas on small messages": the deltas scenario (a JSON state stream, a ticker and random bytes to 20
#     subscribers, each sent as published, Zstd per message and as deltas, on one broker, the matrix alternated 3
#     times): $OUT/deltas.json and .log. About 3 minutes.
#   hooks: "From your backend"'s hooks table: the hooks command (connect and subscribe without and with their hook,
#     REPEAT rounds on fresh brokers): $OUT/hooks.json and .log. About 2 minutes.
#   churn: the "Subscription churn" figures, BenchmarkDotNet's TopicRouterBenchmarks (short job), its JSON export
#     committed as $OUT/churn-TopicRouterBenchmarks.json with $OUT/churn-run.json (command, times, load average,
#     commit) beside it. About 5 minutes.
#
# Usage: loadtest/compare-all.sh [row ...]   rows: fanout stream oneway rpc32 rpc1 collab idle cluster
#          cluster-longpoll presence shards api deltas hooks churn
#          (default: all)
#          and, never by default, broadcast: each target's broadcast search (P = 1 s) and the broadcast chart,
#          about 15 minutes more.
#        Environment: OUT (loadtest/results/readme, the folder README's tables name; elsewhere README is left
#          alone), REPEAT (2), SHORT (1: versus.sh's short windows, about 35 minutes on a 2-core machine in all;
#          0: the full windows, well over an hour), BASELINE (versus.sh).
# Commit the result files with README: `loadtest/readme-tables.py --check` (a load-tool test) fails when
# README's tables are not what the committed files give.
OUT=${OUT:-loadtest/results/readme}
REPEAT=${REPEAT:-2}
SHORT=${SHORT:-1}
[ $# -eq 0 ] && set -- fanout stream oneway rpc32 rpc1 collab idle cluster cluster-longpoll presence shards api deltas hooks churn
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

# run_scenario STEM "SCENARIO OPTIONS" ["REPEAT OPTIONS"]: one scenario run against the target its options name, writing
# $OUT/STEM.json and .log; repeated with `--repeat $REPEAT` unless the third argument says otherwise ("" for none).
run_scenario() {
  echo "=== $1: $2 ($(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/'))"
  # shellcheck disable=SC2086
  $LT $2 ${3---repeat $REPEAT} "${CLUSTER_PORTS[@]}" --out "$OUT/$1.json" > "$OUT/$1.log" 2>&1
  echo "    exit $?"
}

if chosen cluster; then
  # Node k of a cluster listens on the --ports range shifted by k lengths and on HTTP/monitoring port + k, so the
  # HTTP and monitoring ports sit above the third node's TCP range (22568-22600).
  CLUSTER_PORTS=(--ports 22502-22534 --http-port 22680 --monitoring-port 22690)
  for row in fanout rpc1 rpc32; do
    for t in "herald:--target herald" "cluster1:--target cluster --nodes 1" "cluster3:--target cluster --nodes 3" "redis:--target redis" "nats:--target nats"; do
      run_scenario "cluster-$row-${t%%:*}" "${SCENARIO[$row]} ${t#*:}"
    done
  done
fi

if chosen cluster-longpoll; then
  CLUSTER_PORTS=(--ports 22502-22534 --http-port 22680 --monitoring-port 22690)
  # --grace 10: a session's backlog in Redis may take more than the default 3 s to drain on a busy machine; the
  # figure is the window's, and the check still fails a delivery that never comes.
  for row in "fanout:fanout --subscribers 10 --payload 128 $fan --grace 10" "rpc1:rpc --callers 1 --payload small $rpc"; do
    for t in "herald:--target herald" "cluster1:--target cluster --nodes 1" "cluster3:--target cluster --nodes 3"; do
      run_scenario "cluster-longpoll-${row%%:*}-${t%%:*}" "${row#*:} --transport longpoll ${t#*:}"
    done
  done
fi

if chosen presence; then
  # The cluster's subscribe phases are smaller (40 x 50): a node answers a SUBSCRIBE's PING only once Redis has the
  # subscription, 1,800-2,000 new topics/s on a quiet machine here (about 500 on a busy one), so 100,000 would take
  # minutes a phase; the large topic is the same.
  CLUSTER_PORTS=(--ports 22502-22534 --http-port 22680 --monitoring-port 22690)
  for t in "herald:--target herald" "cluster3:--target cluster --nodes 3 --connections 40 --subscriptions 50 --setup-timeout 300"; do
    run_scenario "presence-${t%%:*}" "presence ${t#*:}"
  done
fi

if chosen shards; then
  # One run per shard count (a column each); the same 1,000 topics spread over the shards by the nodes' placement.
  CLUSTER_PORTS=(--ports 22502-22534 --http-port 22680 --monitoring-port 22690)
  for s in 1 2 4; do
    run_scenario "shards-$s" "shards --target cluster --nodes 2 --shards $s --topics 1000 --publications 1000000"
  done
fi

# api and hooks: one node each, on a block of ports of their own (22702-22791, still below the ephemeral range), so
# that these short rows can be rerun alone while another part's run holds 22502-22690.
if chosen api; then
  # One broker, the three modes one after the other in the same run (their ratios are the figures), so no --repeat;
  # the API's listener on the port after the monitoring port.
  CLUSTER_PORTS=(--ports 22702-22734 --http-port 22780 --monitoring-port 22790)
  run_scenario api "api --messages 20000 --batch 100 --concurrency 4 --payload 128 --max-seconds 60 --api-port 22791" ""
fi

if chosen deltas; then
  # One broker, every stream in every mode in turn, the whole matrix 3 times alternated whatever REPEAT says (the
  # median of 3 leaves out the first round's, slowed by the broker's JIT), 3,000 publications of warm-up per cell
  # before the 30,000 measured (the broker's CPU time is read in 10 ms ticks: 30,000 publications make that 0.3 us).
  CLUSTER_PORTS=(--ports 22702-22734 --http-port 22780 --monitoring-port 22790)
  run_scenario deltas "deltas --subscribers 20 --messages 30000 --warmup 3000 --max-lead 1000" "--repeat 3"
fi

if chosen hooks; then
  # A fresh broker per configuration and round (REPEAT rounds); the backend the tool starts takes a free loopback port.
  CLUSTER_PORTS=(--ports 22702-22734 --http-port 22780 --monitoring-port 22790)
  run_scenario hooks "hooks --connections 2000 --concurrency 32" "--rounds $REPEAT"
fi

if chosen churn; then
  # The exported JSON names the job, the machine and every statistic; churn-run.json adds what it does not: the
  # command, when, the load average around the run and the commit.
  artifacts=$(mktemp -d)
  # --buildTimeout: BenchmarkDotNet builds its own copy of the project first, which takes more than its default
  # 2 minutes on a busy 2-core machine.
  bench=(--filter '*TopicRouterBenchmarks*' --job short --exporters json --buildTimeout 900)
  echo "=== churn: TopicRouterBenchmarks ($(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/'))"
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ) before=$(cut -d' ' -f1-3 /proc/loadavg)
  dotnet run -c Release --project broker/bench/Herald.Benchmarks -- "${bench[@]}" --artifacts "$artifacts" > "$OUT/churn.log" 2>&1
  echo "    exit $?"
  after=$(cut -d' ' -f1-3 /proc/loadavg)
  if ! grep -q '"Statistics":{' "$artifacts"/results/*TopicRouterBenchmarks-report-full-compressed.json; then
    echo "    no benchmark ran: see $OUT/churn.log"; rm -rf "$artifacts"; exit 1
  fi
  cp "$artifacts"/results/*TopicRouterBenchmarks-report-full-compressed.json "$OUT/churn-TopicRouterBenchmarks.json" && rm -rf "$artifacts"
  commit=$(git rev-parse HEAD) dirty=$([ -n "$(git status --porcelain -- broker)" ] && echo true || echo false)
  cat > "$OUT/churn-run.json" <<JSON
{
  "commandLine": "dotnet run -c Release --project broker/bench/Herald.Benchmarks -- --filter '*TopicRouterBenchmarks*' ${bench[*]:2}",
  "startedUtc": "$started",
  "finishedUtc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "sourceCommit": "$commit",
  "sourceDirty": $dirty,
  "loadAverageBefore": [${before// /, }],
  "loadAverageAfter": [${after// /, }]
}
JSON
fi

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
