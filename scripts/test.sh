#!/usr/bin/env bash
# `make test`: the whole suite on a real engine, as three lanes side by side, then what must run alone.
#
#   lane a  pytest, ENVCTL_TEST_LANE=a                                                        (output here)
#   lane b  pytest, ENVCTL_TEST_LANE=b, then the full-flavor rehearsal (scripts/rehearse.py)
#   lane c  pytest, ENVCTL_TEST_LANE=c (the swarm tests), then the slim-flavor rehearsal of the five
#           webarena-verified sites (scripts/rehearse.py --flavor slim, instance slim-rehearse, port offset 6000)
#           (lanes b and c write to logs, printed when every lane is done)
#   alone   pytest, ENVCTL_TEST_LANE=alone: the tests that stop or restart the engine (after the lanes)
#
# Which module runs in which lane, and why they cannot collide, is in tests/conftest.py (LANE_B, LANE_C).
# Exit status: non-zero when any part failed. Each part's wall time is printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
read -r -a ARGS <<< "${PYTEST_ARGS:-}"
LOG_B=$(mktemp -t envctl-lane-b.XXXXXX)
LOG_C=$(mktemp -t envctl-lane-c.XXXXXX)
declare -a TIMES=()
rc_a=0 rc_b=0 rc_c=0 rc_alone=0

# lane NAME REHEARSAL-ARGS...: pytest of the lane, then the rehearsal; prints both wall times
lane() {
    local name=$1 t0 rc=0 rc2=0
    shift
    t0=$(date +%s)
    ENVCTL_TEST_LANE=$name "$VENV/bin/pytest" "${ARGS[@]}" || rc=$?
    echo "== lane $name pytest: $(( $(date +%s) - t0 ))s (exit $rc) =="
    t0=$(date +%s)
    "$VENV/bin/python" scripts/rehearse.py "$@" || rc2=$?
    echo "== lane $name rehearsal: $(( $(date +%s) - t0 ))s (exit $rc2) =="
    [ "$rc" -eq 0 ] && [ "$rc2" -eq 0 ]
}

start=$(date +%s)
lane b > "$LOG_B" 2>&1 &
pid_b=$!
# Only the sites with webarena-verified images: under slim, classifieds and the homepage run the full
# flavor's very images, artifacts and steps, which lane b's rehearsal drives (make rehearse runs all seven).
lane c --flavor slim --instance slim-rehearse --port-offset 6000 \
    shopping shopping_admin reddit gitlab wikipedia > "$LOG_C" 2>&1 &
pid_c=$!
trap 'pkill -TERM -P $pid_b 2>/dev/null; pkill -TERM -P $pid_c 2>/dev/null; kill $pid_b $pid_c 2>/dev/null' INT TERM
echo "[test] lanes b (then the full rehearsal) and c (the swarm tests, then the slim rehearsal) run beside this one;"
echo "[test] their logs: $LOG_B $LOG_C"
t0=$(date +%s)
ENVCTL_TEST_LANE=a "$VENV/bin/pytest" "${ARGS[@]}" || rc_a=$?
TIMES+=("$(printf 'lane a       %5ds  (exit %d)' "$(( $(date +%s) - t0 ))" "$rc_a")")
wait "$pid_b" || rc_b=$?
TIMES+=("$(printf 'lane b       %5ds  (exit %d)' "$(( $(date +%s) - start ))" "$rc_b")")
wait "$pid_c" || rc_c=$?
TIMES+=("$(printf 'lane c       %5ds  (exit %d)' "$(( $(date +%s) - start ))" "$rc_c")")
for l in b c; do
    echo
    echo "================================ lane $l's log ================================"
    if [ "$l" = b ]; then cat "$LOG_B"; else cat "$LOG_C"; fi
    echo "=============================================================================="
done
t0=$(date +%s)
ENVCTL_TEST_LANE=alone "$VENV/bin/pytest" "${ARGS[@]}" || rc_alone=$?
[ "$rc_alone" -eq 5 ] && rc_alone=0  # none selected (a tree without such tests) is not a failure
TIMES+=("$(printf 'alone        %5ds  (exit %d)' "$(( $(date +%s) - t0 ))" "$rc_alone")")
echo "== make test: wall times (lanes b and c: from the start, their pytest and rehearsal times are in their logs) =="
printf '%s\n' "${TIMES[@]}"
printf 'total        %5ds\n' "$(( $(date +%s) - start ))"
rm -f "$LOG_B" "$LOG_C"
[ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ] && [ "$rc_c" -eq 0 ] && [ "$rc_alone" -eq 0 ]
