"""What the versus-*.sh tables and readme-tables.py share: the rows, reading a compare result, finding a target's headline, the cells."""
import json
import os

# Each row's label in the tables and the headline it reads, by the row's name (its scenario: versus.sh's SCENARIO).
ROWS = {
    "fanout": ("fan-out 1 -> 100, 128 B, deliveries/s", "deliveries/s"),
    "stream": ("stream 1:1, 91 B, msg/s", "messages/s"),
    "oneway": ("one-way publish, calls/s", "calls/s"),
    "rpc32": ("request/reply, 32 callers, 1 responder, calls/s", "calls/s"),
    "rpc1": ("request/reply, 1 caller, p50 us", "p50 latency us"),
    "collab": ("collab 100x5 D=1 s, mean ms", "100x5-d1 mean latency ms"),
    "collab-p99": ("collab 100x5 D=1 s, p99 ms", "100x5-d1 p99 latency ms"),
    "idle-tcp": ("idle TCP connection, server RSS KB", "server RSS per connection"),
    "idle-longpoll": ("idle long-poll session, server RSS KB", "server RSS per connection"),
    "broadcast": ("broadcast, largest M on time at P = 0.1 s", "largest M on time at P=0.1 s"),
}


def load(out, stem):
    """The compare result $OUT/STEM.json, or None when that row did not run."""
    path = os.path.join(out, f"{stem}.json")
    return json.load(open(path)) if os.path.exists(path) else None


def figure(doc, label, headline):
    """The headline (value, min, max, higherIsBetter) of target LABEL in compare result DOC, if it ran."""
    for t in (doc or {}).get("targets", []):
        if t["label"] == label and t["status"] == "ok":
            for h in t["result"]["headlines"]:
                if h["name"] == headline:
                    return h
    return None


def cell(h):
    """The median with half the min-max spread, e.g. `1.23 M ±4%` (no spread from one repetition); `-` when missing."""
    if h is None:
        return "-"
    v = h["value"]
    spread = (h["max"] - h["min"]) / 2 / v * 100 if v else 0
    text = f"{v/1e6:.2f} M" if v >= 1e6 else f"{v/1e3:.1f} k" if v >= 1e4 else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    return f"{text} ±{spread:.0f}%" if h.get("repetitions", 2) > 1 else text


def ratio(h, peer):
    """H over PEER oriented so that > 1 means H did better; `-` when either is missing."""
    if h is None or peer is None:
        return "-"
    over, under = (h["value"], peer["value"]) if h["higherIsBetter"] else (peer["value"], h["value"])
    return f"{over / under:.2f}x" if under else "-"
