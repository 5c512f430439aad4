#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one script (the device machine runs it from the repository root):
# the CUDA tests, `fbo bench --device cuda` (results/bench/cuda/), and a spec's runs on the GPU.
# Usage: [SKIP_CHECKS=1] [TUNE_S=seconds] bash tests/gpu_check.sh [SPEC [SECONDS]]   (OUT: where logs and a tarball
# of results/ go; TUNE_S: run `fbo tune SPEC` first, for at most that long; .gpu/results/: earlier runs, reused)
# Data: the idx files gzipped under .gpu/MNIST and .gpu/FashionMNIST (the device machine reaches no network).
set -uo pipefail
OUT=${OUT:-results/gpu}; mkdir -p "$OUT"
SPEC=${1:-}; SPEC_S=${2:-240}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
. tests/gpu_data.sh  # data from .gpu/, and the finished runs of an earlier call
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' | tee -a "$OUT/gpu.txt"
python3 -c 'import fbo_cli.cli' || { echo "fbo_cli does not import"; exit 1; }
if [ -z "${SKIP_CHECKS:-}" ]; then
t0=$(date +%s)
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/runs/test_cuda.py 2>&1 | tail -15 | tee "$OUT/cuda_tests.txt"
echo "cuda tests: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout 180 python3 -m fbo_cli bench --device cuda --min-seconds 0.5 2>&1 | tail -60 > "$OUT/bench_log.txt"
echo "bench: $(( $(date +%s) - t0 )) s"; tail -45 "$OUT/bench_log.txt"
cp results/bench/cuda/bench.md results/bench/cuda/bench.csv results/bench/cuda/growth.csv "$OUT/" 2>/dev/null
fi
if [ -n "$SPEC" ]; then
  t0=$(date +%s)
  [ -n "${TUNE_S:-}" ] && timeout -s INT -k 60 "$TUNE_S" python3 -m fbo_cli tune "$SPEC" --jobs 8 --executor processes 2>&1 | tail -25 | tee "$OUT/tune_log.txt"
  timeout -s INT -k 60 "$SPEC_S" python3 -m fbo_cli compare "$SPEC" --jobs 8 --executor processes 2>&1 | tail -25 | tee "$OUT/spec_log.txt"
  echo "spec: $(( $(date +%s) - t0 )) s"
  tar czf "$OUT/results.tgz" --exclude='*.png' --exclude='*.pdf' results/hyperrep results/compare 2>/dev/null
  ls -la "$OUT"
fi
