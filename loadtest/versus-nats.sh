#!/usr/bin/env bash
# Issue 15's table in one go: every row Herald against nats-server, side by side, each row one `compare`
# run (the tool starts each server, runs the row against it, stops it), then Herald again with isolation on
# (Auth:Mode=Token, identities restricted to the scenarios' topics: every PUBLISH and SUBSCRIBE checked
# against permissions, request/reply through another identity's reply permissions, as in auth-cost.sh).
# nats-server runs without authorization in both. Writes loadtest/results/versus-nats/<row>-<auth>.json and
# prints the table (medians over --repeat, with the spread) as markdown for the README.
# About 20 minutes on a 2-core machine with the defaults. fanout-tls runs fan-out 1 -> 100 plain and over TLS
# (--transport tls: each started server given the tool's self-signed certificate) for both brokers in one
# run, with a 10 s warm-up: the TLS path's code takes longer than the plain one's to reach the JIT's last tier.
#
# Usage: loadtest/versus-nats.sh [row ...]   rows: stream oneway rpc32 rpc1 collab idle-tcp idle-longpoll fanout-tls
#        (default: all). Environment: REPEAT (3), AUTH (both | off | on), OUT (loadtest/results/versus-nats),
#        BASELINE (a Herald.Broker.dll: each Herald row also runs this broker just before, an A/B in one run).
# Needs the Release builds (this script builds them) and nats-server on the PATH (Debian: nats-server).
set -u
cd "$(dirname "$0")/.."
dotnet build -c Release broker/src/Herald.Broker >/dev/null && dotnet build -c Release loadtest/Herald.LoadTest >/dev/null || exit 1
LT="dotnet loadtest/Herald.LoadTest/bin/Release/net10.0/Herald.LoadTest.dll"
REPEAT=${REPEAT:-3}
AUTH=${AUTH:-both}
OUT=${OUT:-loadtest/results/versus-nats}
mkdir -p "$OUT"
# Ports below the ephemeral range (32768-60999): a listener there can find its port taken by a client socket.
PORTS=(--ports 22502-22534 --http-port 22580 --monitoring-port 22590)
baseline=(); [ -n "${BASELINE:-}" ] && baseline=(--baseline "$BASELINE")

# The restricted identities (isolation on): a client identity and, for request/reply, a responder identity.
CLIENT_TOKEN=versus-nats-client-token
RESPONDER_TOKEN=versus-nats-responder-token
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
auth_env=(
  Herald__Security__Auth__Mode=Token
  Herald__Security__Auth__Tokens__0__Name=client Herald__Security__Auth__Tokens__0__Sha256="$(sha $CLIENT_TOKEN)"
  Herald__Security__Auth__Tokens__1__Name=responder Herald__Security__Auth__Tokens__1__Sha256="$(sha $RESPONDER_TOKEN)"
)
for i in 0 1; do
  j=0
  for topic in 'bench.>' 'stream.>' 'collab.>' 'idle.>'; do
    auth_env+=("Herald__Security__Auth__Tokens__${i}__Permissions__Publish__${j}=$topic" "Herald__Security__Auth__Tokens__${i}__Permissions__Subscribe__${j}=$topic")
    j=$((j + 1))
  done
done

# name | targets with isolation off | scenario and options
ROWS=(
  "stream|herald/tcp,nats/tcp|stream --messages 4000000 --warmup 1000000"
  "oneway|herald/tcp,nats/tcp|rpc --mode oneway --callers 1 --payload small --seconds 5 --warmup 3"
  "rpc32|herald/tcp,nats/tcp|rpc --callers 32 --payload small --seconds 5 --warmup 3"
  "rpc1|herald/tcp,nats/tcp|rpc --callers 1 --payload small --seconds 5 --warmup 3"
  "collab|herald/tcp,nats/tcp|collab --preset 100x5-d1 --rounds 20"
  "idle-tcp|herald/tcp,nats/tcp|connections --steps 10000"
  "idle-longpoll|herald/longpoll|connections --steps 5000"
  "fanout-tls|herald/tcp,herald/tls,nats/tcp,nats/tls|fanout --subscribers 100 --seconds 10 --warmup 10"
)
wanted=("$@")
chosen() { [ ${#wanted[@]} -eq 0 ] && return 0; for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

for row in "${ROWS[@]}"; do
  IFS='|' read -r name targets scenario <<< "$row"
  chosen "$name" || continue
  # shellcheck disable=SC2086
  if [ "$AUTH" != on ]; then
    echo "=== $name, isolation off: compare $scenario --targets $targets ($(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/'))"
    $LT compare $scenario --targets "$targets" --repeat "$REPEAT" "${PORTS[@]}" "${baseline[@]}" --out "$OUT/$name-off.json" > "$OUT/$name-off.log" 2>&1
    echo "    exit $?"
  fi
  if [ "$AUTH" != off ]; then
    herald=$(tr ',' '\n' <<< "$targets" | grep '^herald' | paste -sd,)
    responder=(); [[ $scenario == rpc* && $scenario != *oneway* ]] && responder=(--responder-token $RESPONDER_TOKEN)
    echo "=== $name, isolation on: compare $scenario --targets $herald ($(date -u +%H:%M:%S), $(uptime | sed 's/.*load/load/'))"
    env "${auth_env[@]}" $LT compare $scenario --targets "$herald" --token $CLIENT_TOKEN "${responder[@]}" --repeat "$REPEAT" "${PORTS[@]}" "${baseline[@]}" --out "$OUT/$name-on.json" > "$OUT/$name-on.log" 2>&1
    echo "    exit $?"
  fi
done

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = [("stream", "stream 1:1, 91 B, msg/s", "messages/s"),
        ("oneway", "one-way publish, calls/s", "calls/s"),
        ("rpc32", "request/reply, 32 callers, 1 responder, calls/s", "calls/s"),
        ("rpc1", "request/reply, 1 caller, p50 us", "p50 latency us"),
        ("collab", "collab 100x5 D=1 s, mean ms", "100x5-d1 mean latency ms"),
        ("idle-tcp", "idle TCP connection, server RSS KB", "server RSS per connection"),
        ("idle-longpoll", "idle long-poll session, server RSS KB", "server RSS per connection")]
def load(name, auth):
    path = os.path.join(out, f"{name}-{auth}.json")
    return json.load(open(path)) if os.path.exists(path) else None
def figure(doc, label, headline):
    for t in (doc or {}).get("targets", []):
        if t["label"] == label and t["status"] == "ok":
            for h in t["result"]["headlines"]:
                if h["name"] == headline:
                    return h
    return None
def cell(h):
    if h is None: return "-"
    v = h["value"]; spread = (h["max"] - h["min"]) / 2 / v * 100 if v else 0
    text = f"{v/1e6:.2f} M" if v >= 1e6 else f"{v/1e3:.1f} k" if v >= 1e4 else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    return f"{text} ±{spread:.0f}%"
def ratio(h, peer):
    if h is None or peer is None: return "-"
    r = h["value"] / peer["value"] if h["higherIsBetter"] else peer["value"] / h["value"]
    return f"{r:.2f}x"
print("| row | Herald | NATS | Herald/NATS | Herald, isolation on | on/NATS |")
print("|---|---:|---:|---:|---:|---:|")
for name, label, headline in rows:
    off, on = load(name, "off"), load(name, "on")
    target = "herald/longpoll" if name == "idle-longpoll" else "herald/tcp"
    h, n, a = figure(off, target, headline), figure(off, "nats/tcp", headline), figure(on, target, headline)
    print(f"| {label} | {cell(h)} | {cell(n)} | {ratio(h, n)} | {cell(a)} | {ratio(a, n)} |")
# fan-out over TLS: the figures, then each broker's TLS / plain (the goal: Herald's at least NATS's)
off, on = load("fanout-tls", "off"), load("fanout-tls", "on")
d = "deliveries/s"
hp, ht, np_, nt = (figure(off, l, d) for l in ("herald/tcp", "herald/tls", "nats/tcp", "nats/tls"))
ap, at = figure(on, "herald/tcp", d), figure(on, "herald/tls", d)
print(f"| fan-out 1 -> 100 over TLS, deliveries/s | {cell(ht)} | {cell(nt)} | {ratio(ht, nt)} | {cell(at)} | {ratio(at, nt)} |")
def tls_ratio(tls, plain): return None if tls is None or plain is None else tls["value"] / plain["value"]
rh, rn, ra = tls_ratio(ht, hp), tls_ratio(nt, np_), tls_ratio(at, ap)
f = lambda r: "-" if r is None else f"{r:.2f}"
g = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}x"
print(f"| fan-out with TLS vs plain (TLS / plain) | {f(rh)} | {f(rn)} | {g(rh, rn)} | {f(ra)} | {g(ra, rn)} |")
print("\nratio > 1: Herald did better (higher figures over NATS's, lower ones NATS's over Herald's); ± half the min-max spread over the repetitions.")
PY
