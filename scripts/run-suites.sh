#!/usr/bin/env bash
# make test-python: the slow suites (the pytest markers in $2: several servers, killed
# processes) run in a second pytest process beside the rest, which mostly waits on the
# database, so the two overlap on two cores. The slow suites' output is printed after the
# others'; the exit status fails if either failed.
set -uo pipefail
pytest_cmd=$1
slow=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# shellcheck disable=SC2086  # $pytest_cmd is a command line, split on purpose
$pytest_cmd -m "$slow" tests >"$log" 2>&1 &
slow_pid=$!
# shellcheck disable=SC2086
$pytest_cmd -m "not ($slow)" tests
fast_rc=$?
wait "$slow_pid"
slow_rc=$?
echo "== the slow suites (-m \"$slow\") =="
cat "$log"
exit $((fast_rc != 0 || slow_rc != 0))
