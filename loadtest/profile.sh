#!/usr/bin/env bash
# Profiles the Herald broker under one load-tool scenario: starts the Release broker by hand (JIT symbols
# for perf: DOTNET_PerfMapEnabled=1), runs the scenario against it (--server external), and meanwhile
# samples the broker with `perf record` (call graphs, 999 Hz) and counts its system calls and context
# switches with `perf stat`, each for PSECS seconds after PDELAY seconds of load. Prints the scenario's
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
[ $# -ge 2 ] || { sed -n 2,14p "$0"; exit 2; }
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
  perf stat -e syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex,context-switches,cpu-migrations,task-clock \
    -p $pid -- sleep "${PSECS:-4}" 2>&1 | grep -E '^ +[0-9]' > "$OUT/$name.stat.txt"
  wait
) &
sampler=$!
$LT "$@" --server external --server-pid $pid "${PORTS[@]}" 2>&1 | grep -E 'messages/s  |calls/s  |deliveries/s  |p50|cores|result|^ +[0-9]+ +[0-9]+ +[0-9]+ '
wait $sampler
echo "--- system calls and context switches in ${PSECS:-4} s of load"
cat "$OUT/$name.stat.txt"
echo "--- flat profile (self time), top 30"
perf report -i "$OUT/$name.perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' \
  | sed -E 's/\[JIT\] tid [0-9]+ +//; s/\[OptimizedTier1\]//; s/ +- +- *$//' | head -30 | tee "$OUT/$name.flat.txt"
