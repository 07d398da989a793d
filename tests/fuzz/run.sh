#!/usr/bin/env bash
# Build the fuzz targets with AFL++ instrumentation and fuzz each for N seconds.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]     (default: 15 s, every target; FUZZ_JOBS at once, 2)
#
# Needs `cargo afl` (cargo install cargo-afl; AFL++ itself is built by `cargo afl config
# --build`); .ci/run installs both. Fails if a target cannot be built or started, or if AFL
# found any crash or hang; it then prints each input's path and a hexdump of it. Replay one:
#   target/release/TARGET < INPUT
# Each run starts from the seeds that target/release/gen_seeds writes (real encodings) and
# leaves its findings in out/TARGET/default/{crashes,hangs} and AFL's log in out/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-15}
shift || true
start=$SECONDS
# The cargo that builds: where builds share a machine through a wrapper (FUZZ_CARGO=lcargo),
# that one.
"${FUZZ_CARGO:-cargo}" afl build --release --quiet
echo "fuzz: targets built in $((SECONDS - start)) s"

rm -rf seeds out
mkdir out
# One directory of seeds per target (src/lib.rs, TARGETS).
target/release/gen_seeds seeds
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(ls seeds)
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }

# AFL_NO_UI: a log instead of the screen UI. AFL_SKIP_CPUFREQ and
# AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES: CI machines' CPU governors and core_pattern are not
# ours to change. AFL_NO_AFFINITY: the machine is shared; do not claim a core.
# AFL_SKIP_CRASHES is not set: a seed that crashes is a finding too.
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
export AFL_FAST_CAL=1

# Two targets at a time (FUZZ_JOBS): each afl-fuzz keeps one core busy, and the machines this
# runs on have two; the whole step then takes half as long.
jobs=${FUZZ_JOBS:-2}
fuzz_one() {
  # -t 1000: an input that takes a decoder a second is a hang worth reporting; the default
  # timeout, calibrated on a busy shared machine, would report noise.
  if cargo afl fuzz -V "$secs" -t 1000 -i "seeds/$1" -o "out/$1" "target/release/$1" \
    >"out/$1.log" 2>&1; then
    echo 0 >"out/$1.rc"
  else
    echo $? >"out/$1.rc"
  fi
}
running=0
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${secs}s"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=()
for t in "${targets[@]}"; do
  if [ "$(cat "out/$t.rc" 2>/dev/null)" != 0 ]; then
    echo "afl-fuzz failed for $t:" >&2
    tail -30 "out/$t.log" >&2
    failed+=("$t")
    continue
  fi
  stats=out/$t/default/fuzzer_stats
  if [ -f "$stats" ]; then
    awk -v t="$t" -F' *: ' '$1 ~ /^(execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs)$/ {
      printf "   %s=%s", $1, $2 } END { print "  (" t ")" }' "$stats"
  fi
  found=$(find "out/$t/default/crashes" "out/$t/default/hangs" -type f ! -name README.txt \
    2>/dev/null || true)
  if [ -n "$found" ]; then
    failed+=("$t")
    while IFS= read -r f; do
      echo "$t: $f" >&2
      od -A x -t x1z -v "$f" | head -40 >&2
    done <<<"$found"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${secs}s each, $jobs at once, nothing found ($((SECONDS - start)) s in all)"
