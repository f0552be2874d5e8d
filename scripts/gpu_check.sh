#!/usr/bin/env bash
# One device call: install, compile every kernel, run the tests, the sanitizers and the
# benchmarks, logs under $OUT (default ./gpu-check-out), a short summary printed last.
# Usage: bash scripts/gpu_check.sh [stage ...]   stages: info tests sanitize bench pybench bench2 prefill decode linear sweep
# (default: info tests sanitize bench pybench; bench2 repeats the CLI run so that
# bench/compare_runs.py can set the CLI/pytest agreement against the CLI's own spread;
# prefill runs experiments/attention/prefill_peers.py, the prefill tiles against FA4 and cuDNN (PREFILL_ARGS,
# e.g. --default-only); decode runs experiments/attention/pdl_decode.py (decode with and without
# programmatic dependent launch), the grouped-query decode grid (--quick) and decode_tiles.py (the packed
# mma tile against the TMA tile);
# linear runs the linear GPU tests, memcheck over the ping-pong kernels, the ping-pong / cooperative
# sweep on the large projections and the linear classes against cuBLASLt and QuACK (measure_classes.py);
# sweep runs the per-op tuning sweeps experiments/<op>/sweep_<op>.py, SWEEP_OPS picks which).
# The optional peers (FlashAttention-4, QuACK) are loaded from .peers/ where that bundle was
# carried along (docs/benchmarking.md).
set -u
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stages=${*:-info tests sanitize bench pybench}
summary=()

run_stage() {  # name, time limit (s), command...
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$OUT/$name.log" | cut -c1-110)")")
}

python3 -m pip install --no-deps --no-build-isolation -q -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
[ -f .peers/load.sh ] && source .peers/load.sh
for stage in $stages; do
    case $stage in
        info) run_stage info 240 python3 -m cufuse info ;;
        tests) run_stage tests ${TESTS_LIMIT:-300} python3 -m pytest -q -p no:cacheprovider --durations=15 ${TESTS_ARGS:-tests} ;;
        sanitize)
            for op in softmax linear attention paged_attention; do
                [ -f "tests/$op/sanitize.py" ] || continue
                run_stage "mem-$op" 180 compute-sanitizer --tool memcheck --error-exitcode 9 python3 "tests/$op/sanitize.py"
                [ "$op" = linear ] || run_stage "race-$op" 180 compute-sanitizer --tool racecheck --error-exitcode 9 python3 "tests/$op/sanitize.py"
            done
            cat "$OUT"/mem-*.log "$OUT"/race-*.log >"$OUT/sanitize.log" 2>/dev/null; rm -f "$OUT"/mem-*.log "$OUT"/race-*.log ;;
        bench) run_stage bench ${BENCH_LIMIT:-300} python3 -m cufuse.bench ${BENCH_ARGS:-} --json "$OUT/bench.json" --plot "$OUT/roofline.png" ;;
        pybench) run_stage pybench ${PYBENCH_LIMIT:-240} python3 -m pytest -q -p no:cacheprovider bench/ ${PYBENCH_ARGS:-} --benchmark-json "$OUT/pybench.json" ;;
        prefill) run_stage prefill ${PREFILL_LIMIT:-300} python3 experiments/attention/prefill_peers.py ${PREFILL_ARGS:-} --json "$OUT/prefill.json" ;;
        decode)
            run_stage pdl ${DECODE_LIMIT:-120} python3 experiments/attention/pdl_decode.py --budget-ms 100
            run_stage gqa ${DECODE_LIMIT:-120} python3 experiments/attention/gqa_decode_run.py "$OUT/gqa.json" --quick
            run_stage tiles ${DECODE_LIMIT:-120} python3 experiments/attention/decode_tiles.py --budget-ms 50 ;;
        linear)
            run_stage linear-tests ${LINEAR_LIMIT:-240} python3 -m pytest -q -p no:cacheprovider -n 8 tests/linear
            run_stage linear-mem 180 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/linear/sanitize.py pingpong
            run_stage linear-sweep 240 env SWEEP_VARIANTS="tma 128x256 s4,pingpong" \
                SWEEP_ONLY="8192x8192x8192 bf16,4096x4096x11008,4096x4096x14336,512x8192x28672,512x4096x14336" \
                python3 experiments/linear/sweep_linear.py
            run_stage linear-classes 300 python3 experiments/linear/measure_classes.py "$OUT/linear.json" --linear --gated \
                --budget-ms 20 ;;
        bench2) run_stage bench2 ${BENCH_LIMIT:-300} python3 -m cufuse.bench ${BENCH_ARGS:-} --json "$OUT/bench2.json" ;;
        sweep)
            for op in ${SWEEP_OPS:-linear attention softmax}; do
                [ -f "experiments/$op/sweep_$op.py" ] && run_stage "sweep_$op" ${SWEEP_LIMIT:-100} python3 "experiments/$op/sweep_$op.py"
            done ;;
        *) echo "unknown stage $stage"; exit 2 ;;
    esac
done
echo "==== tail of bench.log ===="; tail -n 60 "$OUT/bench.log" 2>/dev/null
if [ -f "$OUT/bench.json" ] && [ -f "$OUT/pybench.json" ]; then
    python3 bench/compare_runs.py "$OUT/bench.json" "$OUT/pybench.json" $([ -f "$OUT/bench2.json" ] && echo "$OUT/bench2.json") >"$OUT/compare.log" 2>&1
    echo "==== CLI vs pytest-benchmark ===="; tail -n 8 "$OUT/compare.log"
fi
echo "==== tests failures ===="; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" 2>/dev/null | head -30
echo "==== summary ===="; printf '%s\n' "${summary[@]}"
