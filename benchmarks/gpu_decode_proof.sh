#!/usr/bin/env bash
# Issue 53's GPU proof in one call (~8 minutes): `bench_gpu.py decode` (CUDA-graph decoding against the eager
# loop, Qwen3-1.7B shape, 64 rows, and a kernel profile of a step), `bench_gpu.py train_profile`, the CUDA tests,
# `bench_gpu.py base` (the ScaleRL base, native against trl), then `bench_gpu.py pipeline` (PipelineRL-2 on the
# one card). Each part runs under its own limit, DECODE_LIMIT, TRAIN_LIMIT, TEST_LIMIT, BASE_LIMIT, PIPELINE_LIMIT
# (seconds; 0 skips train_profile, base or pipeline). Results in $OUT: summary.txt, pytest.txt, decode.json,
# train_profile.json, base.json, pipeline.json, run.log. Wheels as gpu_proof.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  uptime; } 2>&1 | tee -a "$OUT/summary.txt"
# One at a time: the eager loop is bound by the host, and a second process on the GPU time-slices it (the eager
# decode measured 88 ms a step beside the tests, 62 alone).
say "decode (limit ${DECODE_LIMIT:-150}s)"
timeout "${DECODE_LIMIT:-150}" $PY -m benchmarks.bench_gpu decode $TINY > "$GPU_PROOF_WORK/decode.log" 2>&1
say "decode: exit $?"
if [ "${TRAIN_LIMIT:-150}" -gt 0 ]; then
  say "train_profile (limit ${TRAIN_LIMIT:-150}s)"
  timeout "${TRAIN_LIMIT:-150}" $PY -m benchmarks.bench_gpu train_profile $TINY > "$GPU_PROOF_WORK/train_profile.log" 2>&1
  say "train_profile: exit $?"
fi
say "tests (limit ${TEST_LIMIT:-150}s)"
timeout "${TEST_LIMIT:-150}" $PY -m pytest -q -p no:cacheprovider -o addopts="" -m "gpu or not slow" -k cuda -rA \
  tests/recipe/test_cuda.py tests/recipe/test_generator_contract.py > "$OUT/pytest.txt" 2>&1
say "tests: exit $?; $(tail -1 "$OUT/pytest.txt")"
# `timeout 0` would mean no limit: a limit of 0 skips the part instead.
if [ "${BASE_LIMIT:-200}" -gt 0 ]; then
  say "base: native then trl (limit ${BASE_LIMIT:-200}s)"
  timeout "${BASE_LIMIT:-200}" $PY -m benchmarks.bench_gpu base $TINY > "$GPU_PROOF_WORK/base.log" 2>&1
  say "base: exit $?"
fi
# PipelineRL-2 with both roles on the card (Qwen3-1.7B body): trainer idle fraction and staleness with the new decode.
if [ "${PIPELINE_LIMIT:-150}" -gt 0 ]; then
  say "pipeline (limit ${PIPELINE_LIMIT:-150}s)"
  timeout "${PIPELINE_LIMIT:-150}" $PY -m benchmarks.bench_gpu pipeline $TINY > "$GPU_PROOF_WORK/pipeline.log" 2>&1
  say "pipeline: exit $?"
fi
for part in decode train_profile base pipeline; do
  [ -f "$GPU_PROOF_WORK/$part.log" ] && { echo "===== $part"; tail -c 100000 "$GPU_PROOF_WORK/$part.log"; }
done > "$OUT/run.log"
say "done"
