#!/usr/bin/env bash
# The measurements that need a machine with many cores, in one run of about 5 minutes on 16:
#   1. the wake-up latency between two processes (pipe, shared-word spin, spin-then-block),
#      with the waiter awake and with a learner pausing 2 ms before each ping;
#   2. the worker-count curve (vecenv-bench --suite scaling): CartPole and the ~100 us env at
#      N=1,024, 1 to all-cores workers, spinning against sleeping;
#   3. what spinning workers cost a learner that computes for 50 ms between steps (CartPole,
#      N=1,024, one worker per core);
#   4. the step suite's small-N rows (CartPole and the ~100 us env at N=8 and 128: Sync, the
#      ceiling, the default plan and "auto").
#
#   bash scripts/many_cores.sh OUT_DIR [PYTHON]
#
# The suites write their markdown, JSON and chart to OUT_DIR as each finishes, and every part's
# output is kept in OUT_DIR/many_cores.log as it comes, so a run cut short keeps what it
# finished; a part that fails does not stop the next.
set -u
out=${1:?usage: bash scripts/many_cores.sh OUT_DIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
status=0

part() {  # part NAME COMMAND...: run it, its output to the terminal and OUT_DIR/many_cores.log
    local name=$1
    shift
    echo "== $name: $*" | tee -a "$out/many_cores.log"
    local start=$SECONDS
    "$@" 2>&1 | tee -a "$out/many_cores.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$out/many_cores.log"
    [ "$rc" -eq 0 ] || status=1
}

cores=$("$py" -c 'import os; print(len(os.sched_getaffinity(0)))')
echo "== machine: $(nproc) cores online, $cores usable; $(uname -srm)" | tee "$out/many_cores.log"
part wake "$py" scripts/wake_latency.py --rounds 20000
part wake_paused "$py" scripts/wake_latency.py --rounds 2000 --pause-us 2000
part scaling "$py" -m vecenv.bench --suite scaling --out "$out"
part learner "$py" scripts/learner_pause.py --num-envs 1024 --workers "$cores" --think-ms 50 --steps 30
part small_n "$py" -m vecenv.bench --workloads cartpole,py100us --sizes 8,128 \
    --runners single,single-par,sync,vecenv-default,vecenv-auto --seconds 1 --reps 2 --out "$out"
exit $status
