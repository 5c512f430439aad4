#!/usr/bin/env bash
# Reproduction grids on the device machine, in parallel lanes: each lane runs its specs one after the
# other (`fbo tune` where the spec has a grid, then `fbo compare`), every lane with JOBS runs at once.
# Usage: [DEADLINE=seconds] [JOBS=4] [JOBS_CPU=JOBS] bash tests/gpu_grids.sh "SPEC SPEC ..." ["cpu SPEC ..." ...]
# (one quoted list per lane; a list starting with "cpu" runs on the CPUs, JOBS_CPU runs at once).
# Lanes on one GPU share it by time slices: with 16 processes each run took about 10x its time alone.
# Finished runs are reused: those committed under docs/results/ and those carried under .gpu/results/. Every 45 s, and at the end, the runs and compare folders written since the start go
# to $OUT/new.tgz, so a command stopped at its limit still brings back what finished. At DEADLINE seconds
# the lanes are stopped (runs in flight are lost; finished ones kept).
# Data: the idx files gzipped under .gpu/MNIST and .gpu/FashionMNIST (the device machine reaches no network).
set -uo pipefail
OUT=${OUT:-results/gpu}; mkdir -p "$OUT"
DEADLINE=${DEADLINE:-540}; JOBS=${JOBS:-4}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t_start=$(date +%s)
mkdir -p results
for t in hyperclean hyperrep auc hfl; do [ -d docs/results/$t ] && cp -a docs/results/$t results/; done
. tests/gpu_data.sh  # data from .gpu/, and the finished runs carried there
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import fbo_cli.cli' || { echo "fbo_cli does not import"; exit 1; }
marker=$(mktemp); touch "$marker"; sleep 1

snapshot() {  # what was written since the start: runs and compare folders (no plots, no checkpoints)
  (cd results && find . -newer "$marker" -type f ! -name '*.png' ! -name '*.pdf' ! -name '*.pt' ! -name '*.lock' \
     -printf '%P\n' > "$OUT/.list" && tar czf "$OUT/.new.tgz" -T "$OUT/.list" 2>/dev/null) && mv "$OUT/.new.tgz" "$OUT/new.tgz"
}

lane() {  # lane NUMBER SPECS...
  local n=$1; shift
  for s in "$@"; do
    local f=experiments/$s.yaml t0=$(date +%s)
    if grep -q '^tune:' "$f"; then python3 -m fbo_cli tune "$f" --jobs "$JOBS" --executor processes 2>&1 | grep -v '━' | tail -40; fi
    python3 -m fbo_cli compare "$f" --jobs "$JOBS" --executor processes 2>&1 | grep -v '━' | tail -30
    echo "== lane $n: $s done in $(( $(date +%s) - t0 )) s (at $(( $(date +%s) - t_start )) s)"
  done
}

pids=(); i=0
for specs in "$@"; do
  i=$((i + 1)); jobs=$JOBS; gpus=${CUDA_VISIBLE_DEVICES-all}
  case "$specs" in cpu\ *) specs=${specs#cpu }; jobs=${JOBS_CPU:-$JOBS}; gpus="";; esac  # a lane on the CPUs
  setsid bash -c "$(declare -f lane); t_start=$t_start JOBS=$jobs; [ '$gpus' = all ] || export CUDA_VISIBLE_DEVICES='$gpus'; lane $i $specs" \
    > "$OUT/lane$i.log" 2>&1 &
  pids+=($!)
done
while :; do
  sleep 45; snapshot
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  if [ $(( $(date +%s) - t_start )) -ge "$DEADLINE" ]; then
    echo "deadline: stopping the lanes"; for p in "${pids[@]}"; do kill -INT -- -"$p" 2>/dev/null; done
    sleep 8; for p in "${pids[@]}"; do kill -KILL -- -"$p" 2>/dev/null; done; break
  fi
done
snapshot
for f in "$OUT"/lane*.log; do echo "### $f"; grep -E '^== lane|tuning,|run\(s\) to do|at the grid|failed|Error|error' "$f" | tail -25; done
echo "total: $(( $(date +%s) - t_start )) s"; ls -la "$OUT"
