#!/usr/bin/env bash
# make test-python: the suites side by side, each in a process of its own with its own
# PostgreSQL. On two cores the run is short of CPU more than waiting (the servers take most of
# it), so the split is for balance: no process should run much longer than the rest.
#
#   scripts/run-suites.sh PYTEST_CMD SLOW_GROUPS [FAST_PARTS [BESIDE_CMD...]]
#
# SLOW_GROUPS: pytest marker expressions separated by commas (several servers, killed
# processes, a browser), one process each; EXPR/N runs a group in N processes, split by test
# file as the fast suite is. The rest (the fast suite, -m "not (...)") runs in
# FAST_PARTS processes (default 1), split by test file (tests/conftest.py, --part K/N).
# BESIDE_CMD: one more command run beside them (make test: the PostgreSQL 15 leg).
# SKIP_SLOW=1 in the environment leaves the slow groups out (the fast suite is the same).
# The first fast part prints as it goes; every other process's output is printed after it, in
# turn, each with its 25 slowest tests (--durations: where the time goes, in every CI log). The
# exit status fails if any process failed.
set -uo pipefail
pytest_cmd=$1
IFS=, read -r -a groups <<<"$2"
group_parts=()
for i in "${!groups[@]}"; do
    group_parts[i]=1
    if [[ ${groups[i]} =~ ^(.*)/([0-9]+)$ ]]; then
        groups[i]=${BASH_REMATCH[1]}
        group_parts[i]=${BASH_REMATCH[2]}
    fi
done
parts=${3:-1}
shift $(($# < 3 ? $# : 3))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
names=()
pids=()
all=""
for group in "${groups[@]}"; do
    all="${all:+$all or }($group)"
done
fast=(-m "not ($all)")
[ -n "$all" ] || fast=()
report=(--durations=25)
spawn() { # name, command...
    local name=$1
    shift
    "$@" >"$dir/${#pids[@]}.log" 2>&1 &
    names+=("$name")
    pids+=($!)
}
[ "${SKIP_SLOW:-}" = 1 ] && groups=()
# One bytecode cache for every process (the suites, and the workers, CLIs and servers their tests
# start), filled before they start. Under PYTHONDONTWRITEBYTECODE (set in CI's environment) each
# pytest process otherwise rewrote the asserts of every test module it imports (~25 s of a core
# per process at collection, ~6 s with the cache) and each worker process compiled Harvest from
# source. Two collections, one per core, fill it; the cache is in $dir, never in the tree.
export PYTHONPYCACHEPREFIX="$dir/pycache"
unset PYTHONDONTWRITEBYTECODE
# shellcheck disable=SC2086
$pytest_cmd --collect-only tests/integration >/dev/null 2>&1 &
# shellcheck disable=SC2086
$pytest_cmd --collect-only --ignore=tests/integration tests >/dev/null 2>&1
wait
# A test in two groups (tests/shard/test_rebalance_chaos.py is shard and chaos) runs in the
# first only: each group leaves out the tests of the groups before it.
earlier=""
for i in "${!groups[@]}"; do
    group=${groups[i]}
    n=${group_parts[i]}
    select="($group)${earlier:+ and not ($earlier)}"
    earlier="${earlier:+$earlier or }($group)"
    for ((k = 1; k <= n; k++)); do
        name="slow suites: -m \"$select\""
        split=()
        [ "$n" -gt 1 ] && split=(--part "$k/$n") && name="$name, part $k/$n"
        # shellcheck disable=SC2086  # $pytest_cmd is a command line, split on purpose
        spawn "$name" $pytest_cmd "${report[@]}" -m "$select" "${split[@]}" tests
    done
done
for ((k = 2; k <= parts; k++)); do
    # shellcheck disable=SC2086
    spawn "fast suite, part $k/$parts" $pytest_cmd "${report[@]}" "${fast[@]}" --part "$k/$parts" tests
done
if [ "$#" -gt 0 ]; then
    spawn "$*" "$@"
fi
split=()
[ "$parts" -gt 1 ] && split=(--part "1/$parts")
[ "$parts" -gt 1 ] && echo "== fast suite, part 1/$parts =="
# shellcheck disable=SC2086
$pytest_cmd "${report[@]}" "${fast[@]}" "${split[@]}" tests
failed=$?
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed=1
    echo "== ${names[$i]} =="
    cat "$dir/$i.log"
done
exit $((failed != 0))
