#!/bin/bash
# The first thing to run on a GPU machine (docs/speed.md §5): one table of what only a GPU can measure,
# printed and written to bench/gpu_check.csv (GPU_CHECK_OUT=FILE elsewhere), in under 8 minutes on one H100.
#   bash bench/gpu_check.sh
# Stages (bench/gpu_check.py), each under its own time limit so that one failure still prints the rest:
#   bench      bench/bench_gpu.py's rows, 160m/410m/1.4b, eager, compiled, chunked loss + mb16 compiled: MFU
#              (goal: >= 40 % at 160m and 410m) and the memory plan beside the measured peak
#   hook       a real 160m run, 200 steps of 256 x 64 tokens, with probes=zhoblimp at 5 checkpoints and
#              without: tokens/s of each and the hook's share of wall time
#   deepspeed  engine=deepspeed ZeRO-1 on NCCL against engine=torch: tokens/s, losses, the memory plan
#   scoring    bf16 scoring against fp32 on the same ZhoBLiMP pairs: |dlp| beside its bound
# Without a CUDA GPU it says so and exits 0 (CI runs that path); without the interpreter or torch, exit 2. GPU_CHECK_DRY=1 runs every stage on the
# CPU with tiny sizes: the code, not the numbers. PYTHON=... names the interpreter (default: .venv/bin/python, else python3).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
OUT=${GPU_CHECK_OUT:-bench/gpu_check.csv}
# a missing interpreter or torch is this machine's set-up to fix, not "no GPU": named, exit 2
if ! command -v "$PY" >/dev/null; then
  echo "gpu_check: no Python interpreter $PY (run scripts/setup.sh, or set PYTHON=...); nothing measured." >&2
  exit 2
fi
if ! why=$("$PY" -c 'import torch' 2>&1); then
  echo "gpu_check: $PY cannot import torch ($(tail -n 1 <<<"$why")); run scripts/setup.sh, or set PYTHON=... to the" \
       "project's interpreter; nothing measured." >&2
  exit 2
fi
if [ "${GPU_CHECK_DRY:-0}" != 1 ] && ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "gpu_check: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured, $OUT not written."
  exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ROWS=$WORK/rows.csv
: >"$ROWS"

stage() {  # NAME SECONDS: one stage under its own limit; a failure or timeout becomes the stage's row
  timeout --kill-after=15 "$2" "$PY" bench/gpu_check.py "$1" "$ROWS" "$WORK" 2>"$WORK/$1.err"
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 20 "$WORK/$1.err" >&2
    "$PY" bench/gpu_check.py failed "$ROWS" "$1" "$rc" "$2" "$WORK/$1.err"
  fi
}
# 445 s in all, inside the 8 minutes: bench compiles 3 models twice; hook trains 2 x 200 steps and scores 5 x 5,900 pairs
stage bench "${GPU_CHECK_BENCH_S:-200}"
stage hook "${GPU_CHECK_HOOK_S:-140}"
stage deepspeed "${GPU_CHECK_DEEPSPEED_S:-60}"
stage scoring "${GPU_CHECK_SCORING_S:-45}"
"$PY" bench/gpu_check.py table "$ROWS" "$OUT"
