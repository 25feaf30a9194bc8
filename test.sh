#!/usr/bin/env bash
# The whole test suite, one command (README's quick start; .ci/run runs it): every .NET test project and the
# TypeScript client's suite, from a fresh clone.
#
#   1. `dotnet build broker.sln`: restore and build every project once (the benchmarks, samples and load tool
#      included, so nothing in the solution rots), while `npm ci` installs the TypeScript suite's packages and
#      tsc compiles the client and its tests (`npm run build:all`).
#   2. Then the suites run side by side, each in its own lane, since most of their time is spent waiting on
#      sockets, timers and child processes rather than on the CPU:
#        - Herald.Broker.Tests
#        - Herald.LoadTest.Tests, then the codec's Herald.Protocol.Tests and Herald.Protocol.NetStandard.Tests
#        - the TypeScript suite (`npm run test:run`, what `npm test` runs after compiling: it starts the broker
#          and the .NET samples built in step 1)
#        - the clients, one after another: Herald.Client.Tests, Herald.Client.NetStandard.Tests, Herald.Cli.Tests
#      (the lanes are balanced by their times on a quiet 2-core machine: TESTING.md)
#      Each lane writes its output to TestResults/logs/<lane>.log, printed when every lane is done; each .NET
#      project its results to TestResults/<project>.trx, the TypeScript suite to
#      clients/typescript/test-results/junit.xml (what .ci/run counts).
#
# Exits non-zero if the build or any lane fails. One project alone: see TESTING.md.
set -uo pipefail
cd "$(dirname "$0")"

logs=TestResults/logs
rm -rf "$logs"
mkdir -p "$logs"
started=$SECONDS

# Dynamic PGO off for every process of the run (the build's, the test hosts, the brokers and load tools the tests
# start): they live seconds to minutes, never long enough to gain from the JIT's instrumented tier, and paying
# for it cost about 30 % of the client suite's CPU (23 s instead of 34 s of user time) on a CPU-bound 2-core
# machine. It changes how code is compiled, not what it does; the broker itself ships with PGO on.
export DOTNET_TieredPGO=0

elapsed() {
  local s=$(($SECONDS - $1))
  printf '%dm %02ds' $((s / 60)) $((s % 60))
}

# 1. The build, with the TypeScript suite's install and compile (npm ci, tsc) beside it.
{
  npm --prefix clients/typescript ci --no-audit --no-fund &&
    npm --prefix clients/typescript run build:all
} >"$logs/typescript.log" 2>&1 &
npm_ci=$!
# The compiler server (shared compilation) even where the environment turns it off: one warm csc for every
# project instead of a cold one per project (110 s instead of 172 s for this build on 2 cores). It is shut down
# once the build is done, so it holds no memory or CPU while the tests run.
dotnet build broker.sln -p:UseSharedCompilation=true
build=$?
dotnet build-server shutdown >/dev/null 2>&1
wait "$npm_ci"
npm_ci_status=$?
echo "test.sh: build $( [ $build -eq 0 ] && echo done || echo FAILED ) in $(elapsed $started)"
if [ $build -ne 0 ]; then
  exit 1
fi

# 2. The lanes.
dotnet_test() {
  dotnet test "$1" --no-build
}

lane() { # lane NAME COMMAND...: runs the command with its output in the lane's log, then says how it went
  local name=$1 since=$SECONDS status
  shift
  "$@" >>"$logs/$name.log" 2>&1
  status=$?
  echo "test.sh: $name $( [ $status -eq 0 ] && echo passed || echo FAILED ) in $(elapsed $since)"
  echo "$status" >"$logs/$name.status"
}

typescript() {
  [ "$npm_ci_status" -eq 0 ] || { echo "npm ci or the TypeScript build failed (exit $npm_ci_status)"; return 1; }
  npm --prefix clients/typescript run test:run
}

one_by_one() { # one_by_one PROJECT...: each project's tests in turn, every one run even after a failure
  local status=0 project
  for project in "$@"; do
    dotnet_test "$project" || status=1
  done
  return $status
}

lanes=(broker loadtest typescript clients)

# Stopped from outside (.ci/run's time cap, Ctrl+C): print what each lane has written so far, so a hung run
# shows where it hung, then stop every process the lanes started.
stop_tree() { # stop_tree PID: TERM to the process and all its descendants, children first
  local child
  for child in $(pgrep -P "$1"); do stop_tree "$child"; done
  kill -TERM "$1" 2>/dev/null
}
on_stop() {
  trap - TERM INT
  echo "test.sh: STOPPED by a signal after $(elapsed $started); each lane's last lines:"
  for name in "${lanes[@]}"; do
    echo "===== $name ($logs/$name.log) ====="
    tail -n 60 "$logs/$name.log" 2>/dev/null
  done
  for child in $(pgrep -P $$); do stop_tree "$child"; done
  exit 124
}
trap on_stop TERM INT
lane broker dotnet_test broker/test/Herald.Broker.Tests &
lane loadtest one_by_one loadtest/Herald.LoadTest.Tests broker/test/Herald.Protocol.Tests broker/test/Herald.Protocol.NetStandard.Tests &
lane typescript typescript &
lane clients one_by_one clients/dotnet/test/Herald.Client.Tests clients/dotnet/test/Herald.Client.NetStandard.Tests clients/dotnet/test/Herald.Cli.Tests &
wait

failed=0
for name in "${lanes[@]}"; do
  echo
  echo "===== $name ($logs/$name.log) ====="
  cat "$logs/$name.log"
  [ "$(cat "$logs/$name.status" 2>/dev/null)" = 0 ] || failed=1
done
echo
echo "test.sh: $( [ $failed -eq 0 ] && echo 'every lane passed' || echo 'a lane FAILED' ) in $(elapsed $started)"
exit $failed
