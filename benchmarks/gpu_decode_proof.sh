#!/usr/bin/env bash
# Issue 53's GPU proof in one call (~5 minutes): `bench_gpu.py decode` (CUDA-graph decoding against the eager
# loop, Qwen3-1.7B shape, 64 rows), the CUDA tests, then `bench_gpu.py base` (the ScaleRL base, native
# against trl). Results in $OUT: summary.txt, pytest.txt, decode.json, base.json, run.log. Wheels as gpu_proof.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  uptime; } 2>&1 | tee -a "$OUT/summary.txt"
# One at a time: the eager loop is bound by the host, and a second process on the GPU time-slices it (the eager
# decode measured 88 ms a step beside the tests, 62 alone).
say "decode (limit ${DECODE_LIMIT:-150}s)"
timeout "${DECODE_LIMIT:-150}" $PY benchmarks/bench_gpu.py decode $TINY > "$GPU_PROOF_WORK/decode.log" 2>&1
say "decode: exit $?"
say "tests (limit ${TEST_LIMIT:-150}s)"
timeout "${TEST_LIMIT:-150}" $PY -m pytest -q -p no:cacheprovider -o addopts="" -m "gpu or not slow" -k cuda -rA \
  tests/recipe/test_cuda.py tests/recipe/test_generator_contract.py > "$OUT/pytest.txt" 2>&1
say "tests: exit $?; $(tail -1 "$OUT/pytest.txt")"
say "base: native then trl (limit ${BASE_LIMIT:-200}s)"
timeout "${BASE_LIMIT:-200}" $PY benchmarks/bench_gpu.py base $TINY > "$GPU_PROOF_WORK/base.log" 2>&1
say "base: exit $?"
for part in decode base; do echo "===== $part"; tail -c 100000 "$GPU_PROOF_WORK/$part.log"; done > "$OUT/run.log"
say "done"
