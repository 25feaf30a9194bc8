#!/usr/bin/env bash
# What isolation costs the hot path (issue 12): fan-out and request/reply against one Herald started by
# hand in three configurations, alternated, ROUNDS rounds each (a fresh broker per configuration and round):
#   off         Auth:Mode=None
#   allow-all   Auth:Mode=Token, the identity may publish and subscribe '>' (nothing checked per message)
#   restricted  Auth:Mode=Token, identities granted 'bench.>' only: callers' inboxes under their own prefix,
#               responders (another identity) answering through the reply permission each request grants
# Prints `uptime` before every run (the machine may be shared). Results: loadtest/results/auth-cost/*.json.
# Needs the Release builds: dotnet build -c Release broker.sln (or the broker and loadtest projects).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
REPEAT=${REPEAT:-2}
WARMUP=${WARMUP:-5}
FIRST=${FIRST_PORT:-33500}      # TCP FIRST..FIRST+32, HTTP FIRST+80, monitoring FIRST+90
LAST=$((FIRST + 32)); HTTP=$((FIRST + 80)); MON=$((FIRST + 90))
BROKER=broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll
LT="dotnet loadtest/Herald.LoadTest/bin/Release/net10.0/Herald.LoadTest.dll"
OUT=loadtest/results/auth-cost
mkdir -p "$OUT"

CALLER_TOKEN=auth-cost-caller-token
RESPONDER_TOKEN=auth-cost-responder-token
ALL_TOKEN=auth-cost-allow-all-token
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

listeners=(--Herald:Tcp:Host=127.0.0.1 --Herald:Tcp:PortRangeStart=$FIRST --Herald:Tcp:PortRangeEnd=$LAST
  --Herald:Http:Host=127.0.0.1 --Herald:Http:Port=$HTTP --Herald:Monitoring:Host=127.0.0.1 --Herald:Monitoring:Port=$MON
  --Herald:Policy:Port=-1)

broker_args() {
  case $1 in
    off) ;;
    allow-all) echo --Herald:Security:Auth:Mode=Token --Herald:Security:Auth:Tokens:0:Name=all \
      --Herald:Security:Auth:Tokens:0:Sha256="$(sha $ALL_TOKEN)" \
      '--Herald:Security:Auth:Tokens:0:Permissions:Publish:0=>' '--Herald:Security:Auth:Tokens:0:Permissions:Subscribe:0=>' ;;
    restricted) echo --Herald:Security:Auth:Mode=Token \
      --Herald:Security:Auth:Tokens:0:Name=caller --Herald:Security:Auth:Tokens:0:Sha256="$(sha $CALLER_TOKEN)" \
      '--Herald:Security:Auth:Tokens:0:Permissions:Publish:0=bench.>' '--Herald:Security:Auth:Tokens:0:Permissions:Subscribe:0=bench.>' \
      --Herald:Security:Auth:Tokens:1:Name=responder --Herald:Security:Auth:Tokens:1:Sha256="$(sha $RESPONDER_TOKEN)" \
      '--Herald:Security:Auth:Tokens:1:Permissions:Publish:0=bench.>' '--Herald:Security:Auth:Tokens:1:Permissions:Subscribe:0=bench.>' ;;
  esac
}

client_args() {
  case $1 in
    off) ;;
    allow-all) echo --token $ALL_TOKEN ;;
    restricted) echo --token $CALLER_TOKEN ;;
  esac
}

for round in $(seq 1 "$ROUNDS"); do
  for config in off allow-all restricted; do
    # shellcheck disable=SC2046
    dotnet "$BROKER" "${listeners[@]}" $(broker_args $config) > "$OUT/broker-$config-$round.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$LAST) 2>/dev/null && break; sleep 0.2; done
    common=(--server external --server-pid $pid --ports $FIRST-$LAST --http-port $HTTP --monitoring-port $MON $(client_args $config)
      --warmup "$WARMUP" --seconds "$SECONDS_PER_RUN" --repeat "$REPEAT")
    responder=(); [ $config = restricted ] && responder=(--responder-token $RESPONDER_TOKEN)
    echo "== round $round, $config: $(uptime)"
    $LT fanout "${common[@]}" --subscribers 100 --payload 128 --out "$OUT/fanout-$config-$round.json" | tail -n 4
    echo "== round $round, $config: $(uptime)"
    $LT rpc "${common[@]}" "${responder[@]}" --callers 1 --payload small --out "$OUT/rpc1-$config-$round.json" | tail -n 4
    echo "== round $round, $config: $(uptime)"
    $LT rpc "${common[@]}" "${responder[@]}" --callers 32 --payload small --out "$OUT/rpc32-$config-$round.json" | tail -n 4
    kill $pid; wait $pid 2>/dev/null || true
  done
done

# The table: each row's median over every repetition of every round, per configuration, and the ratios.
python3 - "$OUT" <<'EOF'
import json, sys, statistics, glob, os
out = sys.argv[1]
rows = [("fanout", "fanout --subscribers 100 --payload 128", "deliveriesPerSecond"),
        ("rpc1", "rpc --callers 1 --payload small", "callsPerSecond"),
        ("rpc32", "rpc --callers 32 --payload small", "callsPerSecond")]
print("| row | off | allow-all (b) | restricted (c) | b/a | c/a |")
print("|---|---:|---:|---:|---:|---:|")
for key, label, field in rows:
    med = {}
    for config in ("off", "allow-all", "restricted"):
        values = []
        for path in sorted(glob.glob(os.path.join(out, f"{key}-{config}-*.json"))):
            values += [r[field] for r in json.load(open(path))["repetitions"]]
        med[config] = statistics.median(values) if values else float("nan")
    a = med["off"]
    print(f"| `{label}` | {a:,.0f} | {med['allow-all']:,.0f} | {med['restricted']:,.0f} | {med['allow-all']/a:.3f} | {med['restricted']/a:.3f} |")
EOF
