#!/usr/bin/env bash
# Every row Herald against nats-server, side by side, each row one `compare`
# run (the tool starts each server, runs the row against it, stops it), then Herald again with isolation on
# (versus.sh's ISOLATION_ENV: Auth:Mode=Token, identities restricted to the scenarios' topics).
# nats-server runs without authorization in both. Writes loadtest/results/versus-nats/<row>-<auth>.json and
# prints the table (medians over --repeat, with the spread) as markdown. README's table is compare-all.sh's.
# About 20 minutes on a 2-core machine with the defaults. fanout-tls runs fan-out 1 -> 100 plain and over TLS
# (--transport tls: each started server given the tool's self-signed certificate) for both brokers in one
# run, with a 10 s warm-up: the TLS path's code takes longer than the plain one's to reach the JIT's last tier.
#
# Usage: loadtest/versus-nats.sh [row ...]   rows: stream oneway rpc32 rpc1 collab idle-tcp idle-longpoll fanout-tls
#        (default: all). Environment: REPEAT (3), AUTH (both | off | on), OUT (loadtest/results/versus-nats),
#        BASELINE (a Herald.Broker.dll: each Herald row also runs this broker just before, an A/B in one run).
# Needs the Release builds (this script builds them) and nats-server on the PATH (Debian: nats-server).
AUTH=${AUTH:-both}
OUT=${OUT:-loadtest/results/versus-nats}
source "$(dirname "$0")/versus.sh" "$@"

# name | targets with isolation off (the scenario: versus.sh's SCENARIO)
ROWS=(
  "stream|herald/tcp,nats/tcp"
  "oneway|herald/tcp,nats/tcp"
  "rpc32|herald/tcp,nats/tcp"
  "rpc1|herald/tcp,nats/tcp"
  "collab|herald/tcp,nats/tcp"
  "idle-tcp|herald/tcp,nats/tcp"
  "idle-longpoll|herald/longpoll"
  "fanout-tls|herald/tcp,herald/tls,nats/tcp,nats/tls"
)
for row in "${ROWS[@]}"; do
  IFS='|' read -r name targets <<< "$row"
  chosen "$name" || continue
  scenario=${SCENARIO[$name]}
  if [ "$AUTH" != on ]; then
    RUN_ENV=()
    run_compare "$name-off" "$scenario" "$targets"
  fi
  if [ "$AUTH" != off ]; then
    herald=$(tr ',' '\n' <<< "$targets" | grep '^herald' | paste -sd,)
    RUN_ENV=("${ISOLATION_ENV[@]}")
    # shellcheck disable=SC2046
    run_compare "$name-on" "$scenario" "$herald" $(isolation_args "$scenario")
  fi
done

PYTHONPATH=loadtest python3 - "$OUT" <<'PY'
import sys
from versus import ROWS, load as load_stem, figure, cell, ratio
out = sys.argv[1]
rows = [(name, *ROWS[name]) for name in ("stream", "oneway", "rpc32", "rpc1", "collab", "idle-tcp", "idle-longpoll")]
def load(name, auth): return load_stem(out, f"{name}-{auth}")
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
