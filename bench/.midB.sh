set -u
export PYTHONUNBUFFERED=1
L=$OUT/logs.txt; t0=$SECONDS
for d in bfloat16 float16; do timeout 110 python3 bench/sweep_attention.py --wgmma-grid $d >> $OUT/sweep_attention.log 2>&1; echo "attn $d rc=$? $((SECONDS-t0))s" >> $L; done
for d in fp16 fp32; do timeout 120 python3 bench/sweep_softmax.py $d >> $OUT/sweep_softmax.log 2>&1; echo "softmax $d rc=$? $((SECONDS-t0))s" >> $L; done
cat $L; grep '=>' $OUT/sweep_softmax.log
