#!/usr/bin/env bash
# make test-python: each group of slow suites (the pytest marker expressions in $2, separated by
# commas: several servers, killed processes, a browser) runs in a pytest process of its own
# beside the rest. They mostly wait on databases and child processes, so the processes overlap
# on two cores. Each group's output is printed after the others'; the exit status fails if any
# process failed.
set -uo pipefail
pytest_cmd=$1
IFS=, read -r -a groups <<<"$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
all=""
for i in "${!groups[@]}"; do
    group=${groups[$i]}
    all="${all:+$all or }$group"
    # shellcheck disable=SC2086  # $pytest_cmd is a command line, split on purpose
    $pytest_cmd -m "$group" tests >"$dir/$i.log" 2>&1 &
    pids+=($!)
done
# shellcheck disable=SC2086
$pytest_cmd -m "not ($all)" tests
failed=$?
for i in "${!groups[@]}"; do
    wait "${pids[$i]}" || failed=1
    echo "== slow suites: -m \"${groups[$i]}\" =="
    cat "$dir/$i.log"
done
exit $((failed != 0))
