#!/usr/bin/env bash
# Runs every fuzz target under fuzz/ for SECONDS each (default 30), from the
# committed seed corpus, and fails on the first crash. FUZZING.md says what
# each target checks.
#
#   scripts/fuzz.sh [SECONDS] [--release]
#
# cargo-fuzz is installed into .tools/ (git-ignored) when missing. It runs
# on the stable toolchain without a sanitizer (-s none: AddressSanitizer
# needs nightly; the code has no unsafe to check). Debug builds by default
# (quicker to build, what CI runs); --release for long runs. New inputs
# libFuzzer finds go to a temporary directory, so the committed corpus only
# changes by hand (copy in what is worth keeping). Targets run one per
# core at a time (libFuzzer's run is one thread).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=30
profile=--dev
for arg in "$@"; do
    case "$arg" in
        --release) profile=--release ;;
        *[!0-9]* | '') echo "usage: scripts/fuzz.sh [SECONDS] [--release]" >&2; exit 2 ;;
        *) seconds="$arg" ;;
    esac
done

tools="$PWD/.tools"
if ! [ -x "$tools/bin/cargo-fuzz" ]; then
    echo "fuzz: installing cargo-fuzz into .tools/" >&2
    # An unoptimized build: it only drives cargo and the fuzz binaries, and
    # CI, which starts from a clean clone, builds it every run.
    cargo install cargo-fuzz --version 0.13.2 --locked --debug --root "$tools" --quiet
fi
export PATH="$tools/bin:$PATH"

cd fuzz
found="$(mktemp -d)"
trap 'rm -rf "$found"' EXIT
cargo fuzz build --sanitizer none "$profile"
# Runs one target; says what it did, or why it failed and where the input is.
run_target() {
    local target="$1" log="$found/$1.log"
    mkdir -p "$found/$target"
    if ! cargo fuzz run --sanitizer none "$profile" "$target" "$found/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "fuzz: $target crashed; the input is under fuzz/artifacts/$target/" >&2
        return 1
    fi
    local runs corpus
    runs="$(awk '/stat::number_of_executed_units/ {print $2}' "$log")"
    corpus="$(ls "corpus/$target" "$found/$target" | grep -vc -e '^$' -e ':$')"
    echo "fuzz: $target: ${runs:-?} executions in ${seconds} s, no crash (corpus $corpus inputs)"
}
at_once="$(nproc)"
running=0
failed=0
for target in $(cargo fuzz list); do
    if [ "$running" -ge "$at_once" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    run_target "$target" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
exit "$failed"
