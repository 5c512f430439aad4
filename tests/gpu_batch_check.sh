#!/usr/bin/env bash
# Run batches on a CUDA GPU, as one script of under 8 minutes (the device machine runs it from the repository root;
# issue 64's targets): the batch bench at R = 64 for FedNest, FBO-AggITD and FedBiO (results/bench/cuda/batch.md:
# runs per hour batched against one by one, target >= 10x for FedNest and FBO-AggITD; its ops_one/ops_batch columns
# the aten calls per outer iteration; the seeds column: 64 seeds in one seed batch, issue 54), the profile of one
# FedNest and one FBO-AggITD iteration (profile.md: calls per iteration and the GPU busy share), and Table 2's
# compared runs on MNIST (experiments/aggitd_table2.yaml, 2,000 rounds) end to end with their wall time (target:
# under 60 s), run batches on (--batch auto), 8 processes on the one GPU. Table 2's seeds do not share a batch
# (participation 0.1: each seed draws its own client sets; `fbo show fednest`). Commit results/bench/cuda/batch.{md,csv}
# under docs/results/bench/cuda/: fbo cost prices GPU batches from it and --batch auto batches seeds on a GPU by its
# seeds column (fbo_cli/grids/run_batches.py, seeds_gain). Budget: about 2 min of bench, 1 min of profile and at
# most 4 min of Table 2, within the 15 minutes of device time with the machine's start.
# Usage: [R=64] bash tests/gpu_batch_check.sh [SECONDS_FOR_TABLE_2]   (OUT: where logs and a tarball of the runs go)
# Data: the idx files gzipped under .gpu/MNIST and .gpu/FashionMNIST (the device machine reaches no network).
set -uo pipefail
OUT=${OUT:-results/gpu}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
. tests/gpu_data.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
timeout 300 python3 -m fbo_cli bench --batch "${R:-64}" --device cuda --iters 2 \
  --only fedbio-hyperclean-fmnist-M10-I5,fednest-mlp-fmnist-m100-C0.1,aggitd-mlp-fmnist-m100-C0.1 \
  --out results/bench/cuda 2>&1 | tail -12 | tee "$OUT/batch_log.txt"
echo "batch bench: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/batch_log.txt"
cp results/bench/cuda/batch.md results/bench/cuda/batch.csv "$OUT/" 2>/dev/null
t0=$(date +%s)
timeout 120 python3 -m fbo_cli bench --profile --device cuda --only fednest-mlp-fmnist-m100-C0.1,aggitd-mlp-fmnist-m100 \
  --out "$OUT" 2>&1 | tail -3
grep -h "aten calls per outer iteration\|GPU busy" "$OUT/profile.md" | tee "$OUT/profile_log.txt"
echo "profile: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/profile_log.txt"
t0=$(date +%s)
timeout -s INT -k 30 "${1:-240}" python3 -m fbo_cli compare experiments/aggitd_table2.yaml --jobs 8 \
  --executor processes --batch auto 2>&1 | tail -12 | tee "$OUT/table2_log.txt"
echo "Table 2's compared runs: $(( $(date +%s) - t0 )) s of wall time" | tee -a "$OUT/table2_log.txt"
tar czf "$OUT/results.tgz" --exclude='*.png' --exclude='*.pdf' results/hyperrep results/compare/aggitd_table2 2>/dev/null
ls -la "$OUT"
