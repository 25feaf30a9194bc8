#!/usr/bin/env bash
# Herald over TCP and over WebSocket beside ASP.NET Core SignalR over WebSockets, row by row, each row one
# `compare` run (the tool starts each server, runs the row against it, stops it). Herald's WebSocket client
# is its TCP client over a WebSocket at /ws (loadtest/docs/transports.md), SignalR's is its own .NET client
# (MessagePack protocol). Writes loadtest/results/versus-signalr/<row>.json and prints the table (medians over
# --repeat, with the spread) as markdown: each figure, WebSocket against TCP (what the medium costs Herald)
# and against SignalR. Broadcast searches the largest M whose every burst arrives within P = 0.1 s, all three
# capped at 12,000 subscribers (the SignalR client's memory in the tool; loadtest/README.md's broadcast table).
#
# Usage: loadtest/versus-signalr.sh [row ...]   rows: fanout stream rpc32 rpc1 collab broadcast (default: all)
#        Environment: REPEAT (3), OUT (loadtest/results/versus-signalr), BASELINE (a Herald.Broker.dll: each
#        Herald row also runs this broker just before, an A/B in one run).
OUT=${OUT:-loadtest/results/versus-signalr}
source "$(dirname "$0")/versus.sh" "$@"
TARGETS=herald/tcp,herald/websocket,signalr/websockets

ROWS=(fanout stream rpc32 rpc1 collab broadcast) # their scenarios: versus.sh's SCENARIO
for name in "${ROWS[@]}"; do
  chosen "$name" && run_compare "$name" "${SCENARIO[$name]}" "$TARGETS"
done

PYTHONPATH=loadtest python3 - "$OUT" <<'PY'
import sys
from versus import ROWS, load, figure, cell, ratio
out = sys.argv[1]
rows = [(name, *ROWS[name]) for name in ("fanout", "stream", "rpc32", "rpc1", "collab", "broadcast")]
print("| row | Herald TCP | Herald WebSocket | SignalR WebSockets | WebSocket/TCP | WebSocket/SignalR | TCP/SignalR |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, label, headline in rows:
    doc = load(out, name)
    tcp, ws, signalr = (figure(doc, t, headline) for t in ("herald/tcp", "herald/websocket", "signalr/websockets"))
    print(f"| {label} | {cell(tcp)} | {cell(ws)} | {cell(signalr)} | {ratio(ws, tcp)} | {ratio(ws, signalr)} | {ratio(tcp, signalr)} |")
print("\nratio > 1: the first did better (higher figures over the second's, lower ones the second's over the first's);"
      " WebSocket/TCP near 1 means the medium costs Herald little. ± half the min-max spread over the repetitions.")
PY
