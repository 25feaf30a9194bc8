#!/usr/bin/env bash
# Profiles the Herald broker under one load-tool scenario: starts the Release broker by hand (JIT symbols
# for perf: DOTNET_PerfMapEnabled=1), runs the scenario against it (--server external), and meanwhile
# samples the broker with `perf record` (call graphs, 999 Hz) and counts its system calls and context
# switches with `perf stat`, each for PSECS seconds after PDELAY seconds of load, and what each recvfrom and send
# carried (the calls' results, and /varz's message counters in the same window). Prints the scenario's
# figures, the counts, and the top of the flat profile (self time per symbol); keeps perf.data.
# How loadtest/docs/profile.md was made.
#
# Usage: loadtest/profile.sh NAME SCENARIO [scenario options...]
#   e.g. loadtest/profile.sh stream stream --messages 8000000 --warmup 500000
# Environment: PDELAY (3), PSECS (4), BROKER (the broker dll), BROKER_ARGS (extra --Herald:... options),
#   OUT (loadtest/results/profile), PORT_BASE (25500: the ports P+2..P+90; another profile running beside this one
#   takes another). Needs perf (Debian: linux-perf) and the right to use it (root, or
#   kernel.perf_event_paranoid <= 1).
set -u
[ $# -ge 2 ] || { sed -n 2,16p "$0"; exit 2; }
cd "$(dirname "$0")/.."
name=$1; shift
OUT=${OUT:-loadtest/results/profile}; mkdir -p "$OUT"
BROKER=${BROKER:-broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll}
LT="dotnet loadtest/Herald.LoadTest/bin/Release/net10.0/Herald.LoadTest.dll"
P=${PORT_BASE:-25500}
PORTS=(--ports $((P + 2))-$((P + 34)) --http-port $((P + 80)) --monitoring-port $((P + 90)))
# shellcheck disable=SC2086
DOTNET_PerfMapEnabled=1 DOTNET_EnableWriteXorExecute=0 dotnet "$BROKER" --Herald:Tcp:Host=127.0.0.1 \
  --Herald:Tcp:PortRangeStart=$((P + 2)) --Herald:Tcp:PortRangeEnd=$((P + 34)) --Herald:Http:Host=127.0.0.1 --Herald:Http:Port=$((P + 80)) \
  --Herald:Monitoring:Host=127.0.0.1 --Herald:Monitoring:Port=$((P + 90)) --Herald:Policy:Port=-1 ${BROKER_ARGS:-} > "$OUT/$name.broker.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$((P + 34))) 2>/dev/null && break; sleep 0.2; done
(
  sleep "${PDELAY:-3}"
  perf record -F 999 -g -p $pid -o "$OUT/$name.perf.data" -- sleep "${PSECS:-4}" > /dev/null 2>&1 &
  # /varz read by the recording's own command, so that its counters and the calls cover the same window
  perf record -e syscalls:sys_exit_recvfrom,syscalls:sys_exit_sendmsg,syscalls:sys_exit_sendto -p $pid -o "$OUT/$name.io.data" -- \
    sh -c "curl -s 127.0.0.1:$((P + 90))/varz > '$OUT/$name.varz-before.json'; sleep ${PSECS:-4}; curl -s 127.0.0.1:$((P + 90))/varz > '$OUT/$name.varz-after.json'" > /dev/null 2>&1 &
  perf stat -e syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex,context-switches,cpu-migrations,task-clock \
    -p $pid -- sleep "${PSECS:-4}" 2>&1 | grep -E '^ +[0-9]' > "$OUT/$name.stat.txt"
  wait
) &
sampler=$!
$LT "$@" --server external --server-pid $pid "${PORTS[@]}" 2>&1 | grep -E 'messages/s  |calls/s  |deliveries/s  |p50|cores|result|^ +[0-9]+ +[0-9]+ +[0-9]+ '
wait $sampler
echo "--- system calls and context switches in ${PSECS:-4} s of load"
cat "$OUT/$name.stat.txt"
echo "--- what each socket call carried in the same ${PSECS:-4} s (the calls' results)"
perf script -i "$OUT/$name.io.data" 2>/dev/null | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^syscalls:/) e = $i; print e, $NF }' > "$OUT/$name.io.txt"
python3 - "$OUT/$name" <<'PY'
import collections, json, sys
n = sys.argv[1]
a, b = (json.load(open(f"{n}.varz-{w}.json"))["messages"] for w in ("before", "after"))
size = (b["sent_bytes"] - a["sent_bytes"]) / max(b["sent"] - a["sent"], 1)  # a MESSAGE on the wire; a PUBLISH is a few bytes less
print(f"  messages per call counted as bytes / {size:.0f} B (a MESSAGE on the wire, /varz)")
calls = collections.defaultdict(list)
for line in open(f"{n}.io.txt"):
    event, result = line.split()
    call = event.removeprefix("syscalls:sys_exit_")
    calls["send" if call.startswith("send") else call].append(int(result, 16) if result.startswith("0x") else int(result))
for call, results in sorted(calls.items()):  # send: sendmsg (several segments) and sendto (one)
    data = [r for r in results if 1 < r < 1 << 40]  # 1: .NET's one-byte peek that waits for data; negative: EAGAIN
    print(f"  {call:8} {len(results):7,} calls: {sum(r == 1 for r in results):6,} one-byte peeks, {sum(r > 1 << 40 or r < 0 for r in results):5,} EAGAIN, "
          f"{len(data):6,} with data, {sum(data) / max(len(data), 1):7,.0f} B each: {sum(data) / size / max(len(results), 1):4.0f} messages per call, {sum(data) / size / max(len(data), 1):4.0f} per call with data")
PY
echo "--- flat profile (self time), top 30"
perf report -i "$OUT/$name.perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' \
  | sed -E 's/\[JIT\] tid [0-9]+ +//; s/\[OptimizedTier1\]//; s/ +- +- *$//' | head -30 | tee "$OUT/$name.flat.txt"
