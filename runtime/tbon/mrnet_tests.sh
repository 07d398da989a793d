#!/bin/sh
# mrnet_tests.sh: run the tree overlay's examples (the MRNet guide's) on this host or across
# the hosts of a host file, as MRNet's own mrnet_tests.sh does, and say which passed.
#
#   mrnet_tests.sh [-l | -r HOSTFILE] [-b DIR] [-t SECONDS] [-k]
#
#   -l           every process on this host (the default)
#   -r HOSTFILE  internal processes and back-ends on the hosts of HOSTFILE (topgen's host
#                list: one `host[:slots]` a line, slots 1 if not given; at least 8 slots for
#                every test), the front-end here. Processes start through the remote shell
#                XPLAT_RSH (default ssh; XPLAT_RSH_ARGS and the other settings of the guide's
#                Appendix G are read too), which must reach each host without a password;
#                the programs must be at the same path on every host, and the working
#                directory (where attach files go) shared.
#   -b DIR       where the examples, topgen and charmrun are built (default: the release
#                directory of CARGO_TARGET_DIR, else of the repository's target/)
#   -t SECONDS   time limit of each test (default 120)
#   -k           keep the work directory (topologies and every test's output)
#
# Build first: cargo build --release -p charmrun -p converse-tbon --examples --bins
# Exit code: 0 when every test passed, 1 when one failed, 2 for bad usage.

set -u
me=$(basename "$0")
usage() {
    echo "usage: $me [-l | -r HOSTFILE] [-b DIR] [-t SECONDS] [-k]" >&2
    exit 2
}

hostfile=""
limit=120
keep=0
here=$(cd "$(dirname "$0")" && pwd)
build="${CARGO_TARGET_DIR:-$here/../../target}/release"
while getopts "lr:b:t:kh" opt; do
    case "$opt" in
    l) hostfile="" ;;
    r) hostfile="$OPTARG" ;;
    b) build="$OPTARG" ;;
    t) limit="$OPTARG" ;;
    k) keep=1 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage
case "$limit" in
'' | *[!0-9]*) echo "$me: -t takes a whole number of seconds, not '$limit'" >&2; exit 2 ;;
esac
if [ -n "$hostfile" ] && [ ! -r "$hostfile" ]; then
    echo "$me: cannot read the host file '$hostfile'" >&2
    exit 2
fi
ex="$build/examples"
for p in "$build/topgen" "$build/charmrun" "$ex/integer_addition_fe" "$ex/integer_addition_be" \
    "$ex/libtbon_filters.so" "$ex/heterogeneous_filters" "$ex/performance_data" \
    "$ex/fault_recovery" "$ex/no_backend_instantiation_fe" "$ex/no_backend_instantiation_be"; do
    if [ ! -e "$p" ]; then
        echo "$me: $p is not built: cargo build --release -p charmrun -p converse-tbon --examples --bins" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mrnet_tests.XXXXXX") || exit 2
cleanup() { [ "$keep" -eq 1 ] && echo "$me: kept $work" || rm -rf "$work"; }
trap cleanup EXIT
# Attach files must be where remote leaves and local back-ends both see them.
cd "$work" || exit 2

passed=0
failed=0
# check NAME LOG PATTERN COUNT: pass when LOG has PATTERN on COUNT lines and the run exited 0.
check() {
    name=$1 log=$2 pattern=$3 count=$4 code=$5
    got=$(grep -c -- "$pattern" "$log")
    if [ "$code" -eq 0 ] && [ "$got" -eq "$count" ]; then
        echo "PASS $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name (exit $code, $got of $count lines with '$pattern'; output: $log)"
        failed=$((failed + 1))
        [ "$keep" -eq 1 ] || sed 's/^/    /' "$log" | tail -20
    fi
}

# run NAME LOG COMMAND...: the command, bounded, its output in LOG; sets $code.
run() {
    name=$1 log=$2
    shift 2
    timeout -k 5 "$limit" "$@" >"$log" 2>&1
    code=$?
}

# The trees every test runs on: flat, two levels, and fan-outs per process (0: a back-end).
specs="g:4 g:2x3 g:2:3,1:0,2x1,0"
for spec in $specs; do
    top="$work/$(echo "$spec" | tr ':,' '._').top"
    if [ -n "$hostfile" ]; then
        "$build/topgen" --fe-host localhost --hosts "$hostfile" "$spec" "$top" || exit 1
    else
        "$build/topgen" "$spec" "$top" || exit 1
    fi
    log="$work/integer_addition.$spec.log"
    run "IntegerAddition $spec" "$log" "$ex/integer_addition_fe" "$top" \
        "$ex/integer_addition_be" "$ex/libtbon_filters.so"
    check "IntegerAddition $spec" "$log" "Success!" 5 "$code"
    log="$work/heterogeneous.$spec.log"
    run "HeterogeneousFilters $spec" "$log" "$ex/heterogeneous_filters" "$top"
    check "HeterogeneousFilters $spec" "$log" "heterogeneous_filters: ok" 1 "$code"
    log="$work/heterogeneous_by_name.$spec.log"
    run "HeterogeneousFilters $spec rank_backends=false" "$log" \
        "$ex/heterogeneous_filters" "$top" --by-name
    check "HeterogeneousFilters $spec rank_backends=false" "$log" "heterogeneous_filters: ok" 1 "$code"
    log="$work/performance_data.$spec.log"
    run "PerformanceData $spec" "$log" "$ex/performance_data" "$top"
    check "PerformanceData $spec" "$log" "performance_data: ok" 1 "$code"
    if [ "$spec" != g:4 ]; then
        # A flat tree has no internal process to kill.
        log="$work/fault_recovery.$spec.log"
        # Its kill files go in the work directory, which the hosts share.
        run "FaultRecovery $spec" "$log" env TMPDIR="$work" "$ex/fault_recovery" "$top"
        check "FaultRecovery $spec" "$log" "fault_recovery: ok" 1 "$code"
    fi
done

# NoBackEndInstantiation: a g:2 tree of internal processes on a charmrun job (here, or on
# the hosts of the host file through ++nodelist), and two back-ends started apart, here,
# attaching to its leaves.
attach="$work/attach.txt"
log="$work/no_backend_instantiation.log"
if [ -n "$hostfile" ]; then
    nodes="$work/nodelist"
    sed -e 's/#.*//' -e 's/:.*//' -e '/^[[:space:]]*$/d' "$hostfile" >"$nodes"
    set -- "$build/charmrun" +p3 ++nodelist "$nodes" \
        ++remote-shell "${XPLAT_RSH:-ssh}${XPLAT_RSH_ARGS:+ $XPLAT_RSH_ARGS}"
else
    set -- "$build/charmrun" +p3 ++local
fi
timeout -k 5 "$limit" "$@" "$ex/no_backend_instantiation_fe" "$attach" 2 +machine tcp \
    >"$log" 2>&1 &
fe=$!
waited=0
while ! grep -q "leaves listen" "$log" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
    kill -0 "$fe" 2>/dev/null || break
    sleep 1
    waited=$((waited + 1))
done
for rank in 0 1; do
    timeout -k 5 "$limit" "$ex/no_backend_instantiation_be" "$attach" "$rank" \
        >"$work/no_backend_be.$rank.log" 2>&1 &
done
wait "$fe"
code=$?
wait
check "NoBackEndInstantiation" "$log" "2 back-ends answered, their sum is 2001" 1 "$code"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
