#!/usr/bin/env bash
# One prepared GPU session, run from the checkout's root on a GPU machine
# whose Python has torch and torch_geometric but not pyg-dist's other needs.
# The device time is short (minutes), so everything that needs the GPU runs
# in one go, each step under its own time limit, its output kept under $OUT:
#
#   1. the carried wheels (.whl/: pyg-dist itself, pyzmq, pymetis) into
#      /tmp/site; pyg-dist must come as a wheel so that its plugin entry
#      points are registered;
#   2. tests/gpu (pinned placement, GPU cache, the CUDA path, nccl);
#   3. bench_gpu_products.py at full products scale (docs/performance.md);
#      JSON rows in $OUT/*.jsonl and on the output, warnings (a server
#      killed at stop, ...) only in $OUT/*.log;
#   4. more bench runs, one per ';'-separated item of $EXTRA: each item is
#      an environment assignment or bench arguments, e.g.
#      EXTRA='--parts 8 --fanouts 15,10; PYG_DIST_THREADS=4 --fanouts 15,10'
#      (a run's rows land in $OUT/extra.jsonl, each under its item);
#   5. a profile of the synchronous loader at [15, 10] (prefetch 0: every
#      step of a batch runs on the profiled thread).
#
# Build the wheels here first (see benchmarks/README.md).
set -u
OUT=${OUT:-/tmp/pyg-dist-device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L
nproc
python3 -c "import torch, torch_geometric as g; print(torch.__version__, g.__version__)"

# A step whose time limit is 0 is skipped.
if [ "${TESTS_S:-150}" != 0 ]; then
    timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/gpu \
        >"$OUT/gpu_tests.log" 2>&1
    echo "tests/gpu exit $?"; tail -n 25 "$OUT/gpu_tests.log"
fi

[ "${BENCH_S:-240}" != 0 ] && timeout "${BENCH_S:-240}" python3 benchmarks/bench_gpu_products.py \
    --batches "${BATCHES:-100}" 2>&1 | tee "$OUT/bench.log" | grep -v WARNING | tee "$OUT/bench.jsonl"

IFS=';' read -ra runs <<<"${EXTRA:-}"
for item in "${runs[@]}"; do
    env_part=$(echo "$item" | grep -o '[A-Z_]*=[^ ]*' | tr '\n' ' ')
    bench_args=$(echo "$item" | sed 's/[A-Z_]*=[^ ]*//g')
    echo "{\"row\": \"extra\", \"item\": \"$item\"}" | tee -a "$OUT/extra.jsonl"
    # shellcheck disable=SC2086
    env $env_part timeout "${EXTRA_S:-100}" python3 benchmarks/bench_gpu_products.py \
        --batches "${BATCHES:-100}" $bench_args 2>&1 | tee -a "$OUT/extra.log" | grep -v WARNING \
        | tee -a "$OUT/extra.jsonl"
done

[ "${PROFILE_S:-90}" = 0 ] && exit 0
timeout "${PROFILE_S:-90}" python3 -m cProfile -o "$OUT/sync_loader.prof" \
    benchmarks/bench_gpu_products.py --fanouts 15,10 --no-cache-rows --prefetch 0 \
    --batches 20 >"$OUT/profile_rows.jsonl" 2>&1
python3 - "$OUT" <<'EOF'
import pstats, sys
out = sys.argv[1]
with open(f"{out}/profile.txt", "w") as f:
    s = pstats.Stats(f"{out}/sync_loader.prof", stream=f)
    s.sort_stats("tottime").print_stats(45)
    s.sort_stats("cumulative").print_stats(45)
print(open(f"{out}/profile.txt").read()[:6000])
EOF
