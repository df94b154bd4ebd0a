#!/usr/bin/env bash
# Does serving from more processes feed the GPU faster? bench_gpu_products.py
# at full scale, [15, 10], with 4, 8 and 16 parts on one host, each row with
# the cores every process used (see run_on_device.sh for the set-up).
set -u
OUT=${OUT:-/tmp/pyg-dist-device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for parts in ${PARTS:-4 8 16}; do
    timeout "${BENCH_S:-100}" python3 benchmarks/bench_gpu_products.py --parts "$parts" \
        --fanouts 15,10 --batches "${BATCHES:-30}" 2>&1 | grep -v WARNING | tee -a "$OUT/parts.jsonl"
done
