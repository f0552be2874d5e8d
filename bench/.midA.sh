set -u
export PYTHONUNBUFFERED=1
L=$OUT/logs.txt
python3 -m pip install --no-deps --no-build-isolation -q -e . > $OUT/install.log 2>&1
t0=$SECONDS
timeout 200 python3 -m cufuse info > $OUT/info.log 2>&1; echo "info rc=$? $((SECONDS-t0))s $(tail -1 $OUT/info.log)" >> $L
timeout 240 python3 -m pytest -q -p no:cacheprovider -x --durations=10 tests > $OUT/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s $(tail -1 $OUT/tests.log)" >> $L
for op in softmax linear attention; do timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/sanitize_$op.py > $OUT/san.log.$op 2>&1; echo "mem-$op rc=$? $((SECONDS-t0))s $(tail -1 $OUT/san.log.$op)" >> $L; done
for op in softmax attention; do timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 tests/sanitize_$op.py > $OUT/race.log.$op 2>&1; echo "race-$op rc=$? $((SECONDS-t0))s $(tail -1 $OUT/race.log.$op)" >> $L; done
cat $OUT/san.log.* $OUT/race.log.* > $OUT/sanitize.log; rm -f $OUT/san.log.* $OUT/race.log.*
for s in 512x4096x4096 64x8192x8192 "4096x4096x4096 fp"; do SWEEP_ONLY="$s" timeout 90 python3 bench/sweep_linear.py >> $OUT/sweep_linear.log 2>&1; echo "sweep $s rc=$? $((SECONDS-t0))s" >> $L; done
cat $L; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -30
