#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer harnesses of tests/fuzz/ with clang (AddressSanitizer,
# UndefinedBehaviorSanitizer, and coverage over the whole library) in build-fuzz, and runs
# each for SECONDS (issue 12).
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]   # default: 600 s each, all of them
#   JOBS=2 scripts/fuzz.sh 60 trace idx      # two at a time (default: one per core)
#
# Harnesses: config (TOML text to a validated topology), idx (the IDX reader), trace (the
# trace reader, summary and timeline), message (what a peer node sends: CAF messages and
# tensors), checkpoint (safetensors files and manifests). Each starts from its seeds in
# tests/fuzz/corpus/NAME/ (config: and every shipped config) and keeps what it learns in
# build-fuzz/corpus/NAME/. A finding is written to build-fuzz/findings/ and fails the run:
# add it to tests/fuzz/corpus/NAME/ (ctest replays that directory, fuzz_replay_NAME), fix
# it, and run again. Prints executions and executions per second of each at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
all=(config idx trace message checkpoint)
harnesses=("$@")
[[ ${#harnesses[@]} -gt 0 ]] || harnesses=("${all[@]}")
for h in "${harnesses[@]}"; do
  [[ " ${all[*]} " == *" $h "* ]] || { echo "fuzz.sh: no harness '$h' (have: ${all[*]})" >&2; exit 2; }
done
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2; }
jobs=${JOBS:-$(nproc)}

dir=build-fuzz
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_CUDA=OFF \
  -DTROUPE_BUILD_TESTS=OFF -DTROUPE_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("troupe_fuzz_$h"); done
cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}"

# Leaks are reported at exit only, by LeakSanitizer; a run stopped by -max_total_time
# still checks them. A 2 GiB RSS limit: no bad input may make troupe allocate more.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$PWD/scripts/sanitizers/ubsan.supp}
mkdir -p "$dir/findings"
run_one() {
  local h=$1 seeds=("tests/fuzz/corpus/$1")
  [[ $h == config ]] && seeds+=(config)
  mkdir -p "$dir/corpus/$h"
  "$dir/troupe_fuzz_$h" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/findings/$h-" \
    "$dir/corpus/$h" "${seeds[@]}" >"$dir/$h.log" 2>&1
}
pids=()
status=0
for h in "${harnesses[@]}"; do
  printf 'fuzz.sh: %s for %s s (log: %s/%s.log)\n' "$h" "$seconds" "$dir" "$h"
  run_one "$h" &
  pids+=($!)
  if [[ ${#pids[@]} -ge $jobs ]]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

printf '\n%-11s %12s %10s %8s %s\n' harness executions "exec/s" corpus result
for h in "${harnesses[@]}"; do
  log="$dir/$h.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$dir/corpus/$h" -type f | wc -l)
  found=$(find "$dir/findings" -name "$h-*" -type f | wc -l)
  if [[ $found -gt 0 ]] || grep -q "^==[0-9]*==ERROR\|^SUMMARY:" "$log"; then
    result="FINDING (see $log, $dir/findings/$h-*)"
    status=1
  else
    result="nothing found"
  fi
  printf '%-11s %12s %10s %8s %s\n' "$h" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
done
exit $status
