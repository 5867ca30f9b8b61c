#!/usr/bin/env bash
# `make test`: the whole suite on a real engine, as two lanes side by side, then what must run alone.
#
#   lane a  pytest, ENVCTL_TEST_LANE=a, then the slim-flavor rehearsal of the five webarena-verified sites
#           (scripts/rehearse.py --flavor slim, instance slim-rehearse, port offset 6000)   (output here)
#   lane b  pytest, ENVCTL_TEST_LANE=b, then the full-flavor rehearsal (scripts/rehearse.py)
#           (output to a log, printed when both lanes are done)
#   alone   pytest, ENVCTL_TEST_LANE=alone: the tests that restart the engine (after both lanes)
#
# Which module runs in which lane, and why they cannot collide, is in tests/conftest.py (LANE_B).
# Exit status: non-zero when any part failed. Each part's wall time is printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
read -r -a ARGS <<< "${PYTEST_ARGS:-}"
LOG_B=$(mktemp -t envctl-lane-b.XXXXXX)
declare -a TIMES=()
rc_a=0 rc_b=0 rc_alone=0

lane_b() {
    local t0 rc=0 rc2=0
    t0=$(date +%s)
    ENVCTL_TEST_LANE=b "$VENV/bin/pytest" "${ARGS[@]}" || rc=$?
    echo "== lane b pytest: $(( $(date +%s) - t0 ))s (exit $rc) =="
    t0=$(date +%s)
    "$VENV/bin/python" scripts/rehearse.py || rc2=$?
    echo "== lane b rehearsal: $(( $(date +%s) - t0 ))s (exit $rc2) =="
    [ "$rc" -eq 0 ] && [ "$rc2" -eq 0 ]
}

start=$(date +%s)
lane_b > "$LOG_B" 2>&1 &
pid_b=$!
trap 'pkill -TERM -P $pid_b 2>/dev/null; kill $pid_b 2>/dev/null' INT TERM
echo "[test] lane b (pytest ENVCTL_TEST_LANE=b, then the rehearsal) runs beside this one; its log: $LOG_B"
t0=$(date +%s)
ENVCTL_TEST_LANE=a "$VENV/bin/pytest" "${ARGS[@]}" || rc_a=$?
TIMES+=("$(printf 'lane a       %5ds  (exit %d)' "$(( $(date +%s) - t0 ))" "$rc_a")")
# The slim rehearsal: its own instance and port offset, apart from lane b's full one (rehearse, 5000).
# Only the sites with webarena-verified images: under slim, classifieds and the homepage run the full
# flavor's very images, artifacts and steps, which lane b's rehearsal drives (make rehearse runs all seven).
t0=$(date +%s)
rc_slim=0
"$VENV/bin/python" scripts/rehearse.py --flavor slim --instance slim-rehearse --port-offset 6000 \
    shopping shopping_admin reddit gitlab wikipedia || rc_slim=$?
echo "== lane a slim rehearsal: $(( $(date +%s) - t0 ))s (exit $rc_slim) =="
TIMES+=("$(printf 'lane a slim  %5ds  (exit %d)' "$(( $(date +%s) - t0 ))" "$rc_slim")")
[ "$rc_slim" -eq 0 ] || rc_a=$rc_slim
wait "$pid_b" || rc_b=$?
TIMES+=("$(printf 'lane b       %5ds  (exit %d)' "$(( $(date +%s) - start ))" "$rc_b")")
echo
echo "================================ lane b's log ================================"
cat "$LOG_B"
echo "=============================================================================="
t0=$(date +%s)
ENVCTL_TEST_LANE=alone "$VENV/bin/pytest" "${ARGS[@]}" || rc_alone=$?
[ "$rc_alone" -eq 5 ] && rc_alone=0  # none selected (a tree without such tests) is not a failure
TIMES+=("$(printf 'alone        %5ds  (exit %d)' "$(( $(date +%s) - t0 ))" "$rc_alone")")
echo "== make test: wall times =="
printf '%s\n' "${TIMES[@]}"
printf 'total        %5ds\n' "$(( $(date +%s) - start ))"
rm -f "$LOG_B"
[ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ] && [ "$rc_alone" -eq 0 ]
