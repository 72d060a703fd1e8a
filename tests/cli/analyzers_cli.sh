#!/usr/bin/env bash
# analyze / check / watch on synthetic traces: analyze_cli.sh LPDIAG WORKDIR
set -euo pipefail
lpdiag=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$lpdiag" synth "$work/chain.h5" --kind chain --seed 11 >/dev/null
"$lpdiag" synth "$work/clean.h5" --kind clean --seed 12 >/dev/null
"$lpdiag" synth "$work/spike.h5" --kind loss-spike --seed 13 >/dev/null

# analyze's exit code, as --help says: 1 on a finding (a failed run, a chain or a candidate), 0 on a
# healthy run without one, with --json or not.
expect_rc() {  # expect_rc RC COMMAND...
  local want=$1 rc=0; shift
  "$@" >"$work/rc.out" 2>&1 || rc=$?
  [[ $rc == "$want" ]] || { echo "FAIL: exit $rc (want $want): $*"; cat "$work/rc.out"; exit 1; }
}
expect_rc 1 "$lpdiag" analyze "$work/chain.h5"
expect_rc 0 "$lpdiag" analyze "$work/clean.h5"
expect_rc 1 "$lpdiag" analyze --json "$work/spike.h5"
expect_rc 2 "$lpdiag" analyze "$work/nope.h5"
# Two unrelated runs (each rank 0 of 1) are not merged into one verdict.
expect_rc 2 "$lpdiag" analyze "$work/chain.h5" "$work/clean.h5"
grep -q "not the rank files of one run" "$work/rc.out" || { echo "FAIL: unrelated runs merged"; exit 1; }
# The answer first: the verdict on the line after the file, then the chain; the evidence reads
# the right way round (the head's growth relative to the median head; where the loss went).
out=$("$lpdiag" analyze --verbose "$work/chain.h5" || true)
sed -n 2p <<<"$out" | grep -q "^FAILED: " || { echo "FAIL: the verdict is not on line 2: $out"; exit 1; }
sed -n 3p <<<"$out" | grep -q "^causal chain at layer" || { echo "FAIL: the chain is not on line 3"; exit 1; }
grep -Eq "^  C4: .* grew [0-9.]+x more than the median head from step" <<<"$out" || { echo "FAIL: C4 wording"; exit 1; }
grep -Eq "^  C5: loss rose from .* and to .* by step" <<<"$out" || { echo "FAIL: C5 wording (no peak)"; exit 1; }
[[ $(grep -c "more than the median head" <<<"$out") == 1 ]] || { echo "FAIL: a link's sentence printed more than once"; exit 1; }
"$lpdiag" probe --help | grep -q "sr (stochastic rounding" || { echo "FAIL: probe --help omits sr"; exit 1; }
echo "ok: analyze exit codes and text"

# A loss that turns up in the trace's last steps: the headline says healthy only up to the turn
# (the clean trace's loss replaced by a linear fall with Gaussian noise, s.d. 0.01, fixed seed 5,
# that rises 0.07 over records at 92-96% of the run: the unit test's series). Exit 0: no failure.
"$lpdiag" synth "$work/rise.h5" --kind clean --seed 12 >/dev/null
/usr/bin/python3 - "$work/rise.h5" <<'PY'
import sys
import h5py
import numpy as np
rng = np.random.default_rng(5)
print("seed 5")
with h5py.File(sys.argv[1], "r+") as h:
    n = len(h["scalars/loss"])
    i = np.arange(n)
    h["scalars/loss"][:] = 0.12 + 0.25 * (1 - i / n) + 0.07 * np.clip((i - 0.92 * n) / (0.04 * n), 0, 1) + rng.normal(0, 0.01, n)
PY
expect_rc 0 "$lpdiag" analyze "$work/rise.h5"
sed -n 2p "$work/rc.out" | grep -Eq "^HEALTHY UNTIL STEP [0-9]+: the loss was rising when the trace ended \(loss_rise_at_end\)$" ||
  { echo "FAIL: the headline of a loss rising at the end:"; cat "$work/rc.out"; exit 1; }
"$lpdiag" report "$work/rise.h5" -o "$work/rise.html" >/dev/null
grep -Eq "<h2 class=\"open\">Run healthy until step [0-9]+: the loss was rising when the trace ended</h2>" "$work/rise.html" ||
  { echo "FAIL: the report's headline of a loss rising at the end"; grep -o "<h2[^<]*</h2>" "$work/rise.html"; exit 1; }
echo "ok: a loss rising at the end is healthy only until its turn (analyze and report)"

# analyze --json: the documented keys, a found chain on the planted trace, the missing link on a null.
"$lpdiag" analyze --json "$work/chain.h5" > "$work/chain.json" || true
"$lpdiag" analyze --json "$work/spike.h5" > "$work/spike.json" || true
"$lpdiag" synth "$work/truth.h5" --kind chain --seed 11 --json > "$work/truth.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
c, s, t = (json.load(open(f"{w}/{n}.json")) for n in ("chain", "spike", "truth"))
ch = c["chain"]
assert ch["found"] is True and ch["layer_index"] == t["layer_index"] and ch["head"] == t["head"], ch
assert 0 < ch["confidence"] <= 1
for k in ["C1", "C2", "C3", "C4", "C5"]:
    l = ch["links"][k]
    assert l["present"] and isinstance(l["onset_step"], int) and l["evidence"], (k, l)
assert c["missing_links"] == [] and c["findings"]
assert s["chain"]["found"] is False and s["chain"]["layer_index"] is None
assert "C2" in s["missing_links"] and s["chain"]["links"]["C5"]["present"]
assert s["chain"]["links"]["C2"]["onset_step"] is None
print("ok: analyze --json")
PY

# A chain whose bias is steady (seed 300: the co-variation test lacks the power): a candidate,
# undecided, named in the text, the JSON, check and the report, never a claimed chain.
"$lpdiag" synth "$work/steady.h5" --kind chain --seed 300 --steady-bias --json > "$work/steady-truth.json"
"$lpdiag" analyze --json "$work/steady.h5" > "$work/steady.json" || true
{ "$lpdiag" analyze "$work/steady.h5" || true; } | grep -q "^candidate chain at layer .*: every link present, undecided" || { echo "FAIL: no candidate line"; exit 1; }
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
c, t = json.load(open(f"{w}/steady.json")), json.load(open(f"{w}/steady-truth.json"))
ch = c["chain"]
assert ch["found"] is False and ch["undecided"] is True, ch
assert ch["layer_index"] == t["layer_index"] and ch["head"] == t["head"], (ch, t)
assert c["driving_evidence"] == "timing" and "--reference" in c["decide_with"], c
assert c["missing_links"] == []
print("ok: undecided candidate")
PY
set +e
out=$("$lpdiag" check "$work/steady.h5"); rc=$?
set -e
[[ $rc -eq 1 ]] && grep -Eq "candidate causal chain at layer .* undecided" <<<"$out" || { echo "FAIL: check on a candidate: rc $rc, $out"; exit 1; }
"$lpdiag" report "$work/steady.h5" -o "$work/steady.html" >/dev/null
grep -q "Candidate causal chain at layer" "$work/steady.html" || { echo "FAIL: report headline of a candidate"; exit 1; }
! grep -q '<h3 class="none">No causal chain' "$work/steady.html" || { echo "FAIL: report says no chain"; exit 1; }

# check: 1 with file:step lines on a chain, 0 on a clean run, 2 on unusable input, JUnit.
set +e
out=$("$lpdiag" check "$work/chain.h5" "$work/clean.h5" --junit "$work/check.xml"); rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || { echo "FAIL: check rc $rc on a chain"; exit 1; }
grep -Eq "^$work/chain.h5:[0-9]+: causal chain at layer" <<<"$out" || { echo "FAIL: no file:step chain line"; exit 1; }
grep -Eq "^$work/chain.h5:[0-9]+: biased rounding" <<<"$out" || { echo "FAIL: no file:step bias line"; exit 1; }
! grep -q "clean.h5" <<<"$out" || { echo "FAIL: findings on the clean trace"; exit 1; }
grep -q 'tests="2" failures="1"' "$work/check.xml" || { echo "FAIL: junit"; exit 1; }
"$lpdiag" check "$work/clean.h5" 2>/dev/null || { echo "FAIL: check on clean"; exit 1; }
set +e
"$lpdiag" check "$work/nope.h5" 2>/dev/null; rc=$?
"$lpdiag" check "$work/clean.h5" --max-repeated-rate 0.0001 >/dev/null; rc2=$?
set -e
[[ $rc -eq 2 ]] || { echo "FAIL: check rc $rc on a missing file"; exit 1; }
[[ $rc2 -eq 1 ]] || { echo "FAIL: --max-repeated-rate did not flag"; exit 1; }
echo "ok: check"

# watch: a slow writer; every link is reported while the run goes on, then the close.
"$lpdiag" synth "$work/live.h5" --kind chain --seed 3 --records 1500 --flush-every 50 --delay-us 1000 >/dev/null &
writer=$!
set +e
out=$(timeout 120 "$lpdiag" watch "$work/live.h5" --interval 0.2); rc=$?
set -e
wait $writer
# The planted chain ends in a failed run: watch exits 1, as analyze does.
[[ $rc == 1 ]] || { echo "FAIL: watch exit $rc on a failed run (want 1)"; exit 1; }
echo "$out"
for k in C1 C2 C3 C4 C5; do grep -q "\] $k " <<<"$out" || { echo "FAIL: watch did not report $k"; exit 1; }; done
grep -q "writer closed" <<<"$out" || { echo "FAIL: watch did not see the close"; exit 1; }
# The first warning came before the run ended.
first=$(grep -o '^\[[0-9]* records' <<<"$out" | head -1 | grep -o '[0-9]*')
(( first < 1500 )) || { echo "FAIL: no early warning"; exit 1; }
echo "ok: watch (first warning after $first of 1500 records)"
