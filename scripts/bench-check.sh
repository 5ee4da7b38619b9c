#!/usr/bin/env bash
# Runs the push benches briefly (release build, 1 s warm-up, 3 s of
# measurement each) and fails when a bench's median, set against the
# machine's speed, is more than twice the one recorded in
# benches/recorded.tsv, so a figure that moves that far cannot go unnoticed
# (CI runs this). The machine's speed is the `calibration/` bench, which runs
# no meshpush code: each bench's ratio to its record is divided by the
# calibration's ratio to its own, so a machine twice as slow as the one the
# record was made on does not fail a commit, and a commit twice as slow
# fails on any machine. A bench missing from either side fails too.
# --record writes this run's medians into benches/recorded.tsv instead
# (after a change that moves a figure on purpose; say so in perf.md).
#
#   scripts/bench-check.sh [--record]
set -euo pipefail
cd "$(dirname "$0")/.."
record=false
[[ "${1:-}" == --record ]] && record=true
# This run's figures go to criterion's baseline "bench-check", beside (not
# over) the ones a developer keeps; the last run's are removed first.
find target/criterion -type d -name bench-check -prune -exec rm -rf {} + 2>/dev/null || true
cargo bench --bench push -- --warm-up-time 1 --measurement-time 3 --noplot --save-baseline bench-check \
    >target/bench-check.log 2>&1 || {
    tail -30 target/bench-check.log >&2
    echo "bench-check: the benches did not run (log: target/bench-check.log)" >&2
    exit 1
}
python3 - "$record" <<'PY'
import glob, json, sys

record = sys.argv[1] == "true"
measured = {}
for path in glob.glob("target/criterion/**/bench-check/benchmark.json", recursive=True):
    meta = json.load(open(path))
    estimates = json.load(open(path.replace("benchmark.json", "estimates.json")))
    measured[meta["full_id"]] = estimates["median"]["point_estimate"]
if record:
    header = [l for l in open("benches/recorded.tsv") if l.startswith("#")]
    with open("benches/recorded.tsv", "w") as f:
        f.writelines(header)
        for name in sorted(measured):
            f.write(f"{name}\t{round(measured[name])}\n")
    print(f"bench-check: recorded {len(measured)} medians in benches/recorded.tsv")
    sys.exit(0)
recorded = {}
for line in open("benches/recorded.tsv"):
    if line.strip() and not line.startswith("#"):
        name, ns = line.rstrip("\n").split("\t")
        recorded[name] = float(ns)

def shown(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"

failed = []
calibration = sorted(n for n in recorded if n.startswith("calibration/"))
if len(calibration) != 1 or calibration[0] not in measured:
    print("bench-check: FAIL one calibration/ bench must be both recorded and run", file=sys.stderr)
    sys.exit(1)
machine = measured[calibration[0]] / recorded[calibration[0]]
print(f"bench-check: {calibration[0]}: {shown(measured[calibration[0]])} (recorded {shown(recorded[calibration[0]])}): "
      f"this machine takes {machine:.2f}× the record's time; each ratio below is divided by that")
for name in sorted(set(recorded) | set(measured)):
    if name in calibration:
        continue
    if name not in measured:
        failed.append(f"{name}: recorded but not run")
        continue
    if name not in recorded:
        failed.append(f"{name}: run but not recorded (scripts/bench-check.sh --record)")
        continue
    ratio = measured[name] / recorded[name]
    relative = ratio / machine
    verdict = "ok" if relative <= 2.0 else "SLOWER THAN TWICE THE RECORD"
    print(f"bench-check: {name}: {shown(measured[name])} (recorded {shown(recorded[name])}, {ratio:.2f}×, "
          f"{relative:.2f}× for this machine) {verdict}")
    if relative > 2.0:
        failed.append(f"{name}: {shown(measured[name])}, {relative:.1f}× the recorded {shown(recorded[name])} "
                      f"for this machine ({ratio:.1f}× as measured)")
for f in failed:
    print(f"bench-check: FAIL {f}", file=sys.stderr)
sys.exit(1 if failed else 0)
PY
