#!/usr/bin/env bash
# An A/B of two Herald builds that the machine's drift and a run's order cannot tilt: the scenario runs as a
# separate process per run (a fresh load tool and a fresh broker each time), alternating A B A B ... for
# RUNS pairs, after one unmeasured pair. Prints every run's headline, each build's median with its min and
# max, and the median of the pair-by-pair ratios B/A (> 1: B did better, for a lower-is-better headline
# A/B). `compare --baseline` runs both in one tool process, one after the other: on this 2-core machine the
# first of the two was up to 10-40 % faster whichever build it was, so changes under about 15 % need this.
#
# Usage: loadtest/ab.sh A.dll B.dll HEADLINE SCENARIO [scenario options...]
#   e.g. loadtest/ab.sh /tmp/base/broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll \
#          broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll messages/s stream --messages 6000000
# Environment: RUNS (6 pairs), OUT (loadtest/results/ab: each run's result JSON), A_ENV and B_ENV (VAR=value
# words each side's tool runs with, which the broker it starts inherits: e.g. B_ENV=Herald__Tcp__IoLoops=2, so
# one build can be compared with itself under another setting), PORT_BASE (24500: the ports P+2..P+90).
# Needs the Release load tool (dotnet build -c Release loadtest/Herald.LoadTest).
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,15p "$0"; exit 2; }
cd "$(dirname "$0")/.."
A=$(realpath "$1"); B=$(realpath "$2"); HEADLINE=$3; shift 3
[ -f "$A" ] && [ -f "$B" ] || { echo "ab.sh: no broker at '$A' or '$B'" >&2; exit 2; }
RUNS=${RUNS:-6}
OUT=${OUT:-loadtest/results/ab}
mkdir -p "$OUT"
LT="dotnet loadtest/Herald.LoadTest/bin/Release/net10.0/Herald.LoadTest.dll"
P=${PORT_BASE:-24500} # another A/B running beside this one takes another PORT_BASE
PORTS=(--ports $((P + 2))-$((P + 34)) --http-port $((P + 80)) --monitoring-port $((P + 90)))
rm -f "$OUT"/a-*.json "$OUT"/b-*.json

run() { # LABEL INDEX BROKER SCENARIO...: one run as its own process
  local label=$1 index=$2 broker=$3; shift 3
  local side=${label^^}_ENV
  # shellcheck disable=SC2086
  env ${!side:-} $LT "$@" --broker-dll "$broker" "${PORTS[@]}" --out "$OUT/$label-$index.json" > "$OUT/$label-$index.log" 2>&1 \
    || { echo "ab.sh: run $label-$index failed, see $OUT/$label-$index.log" >&2; exit 1; }
}
for i in $(seq 0 "$RUNS"); do # pair 0 warms the machine and is not counted
  run a "$i" "$A" "$@"
  run b "$i" "$B" "$@"
done

python3 - "$OUT" "$RUNS" "$HEADLINE" <<'PY'
import json, statistics, sys
out, runs, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def figure(path):
    for h in json.load(open(path))["headlines"]:
        if h["name"] == name:
            return h["value"], h["higherIsBetter"]
    sys.exit(f"ab.sh: no headline '{name}' in {path}")
pairs = [(figure(f"{out}/a-{i}.json"), figure(f"{out}/b-{i}.json")) for i in range(1, runs + 1)]
higher = pairs[0][0][1]
a = [p[0][0] for p in pairs]; b = [p[1][0] for p in pairs]
ratios = [(y / x if higher else x / y) for x, y in zip(a, b)]
fmt = lambda v: f"{v:,.3g}" if v < 1000 else f"{v:,.0f}"
print(f"{name} ({'higher' if higher else 'lower'} is better), {runs} alternated pairs after one not counted")
print("  A runs: " + "  ".join(fmt(v) for v in a))
print("  B runs: " + "  ".join(fmt(v) for v in b))
print(f"  A median {fmt(statistics.median(a))} (min {fmt(min(a))}, max {fmt(max(a))})")
print(f"  B median {fmt(statistics.median(b))} (min {fmt(min(b))}, max {fmt(max(b))})")
print(f"  B vs A, median of the pair ratios: {statistics.median(ratios):.3f}x (min {min(ratios):.3f}, max {max(ratios):.3f}); > 1: B did better")
PY
