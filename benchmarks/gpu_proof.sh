#!/usr/bin/env bash
# The project's CUDA proof on one GPU, in about 5 minutes: the CUDA tests, then benchmarks/bench_gpu.py's
# parts, each under its own time limit so one hang cannot take the others. Results: $OUT/summary.txt,
# pytest.txt, native.json (or native_train.json), pipeline.json, trl.json, run.log: 6 files (BENCHMARKS.md, "On one GPU: NVIDIA H200").
# SIDE_PARTS picks the parts run beside the tests (default "pipeline trl"); SIDE_LIMIT and NATIVE_LIMIT their
# time limits in seconds. E.g. the trl comparison alone: SIDE_PARTS=trl SIDE_LIMIT=300 NATIVE_LIMIT=1 bash ...
#
# The GPU machine has torch (CUDA), transformers, accelerate, pytest, pandas and scipy but no package index:
# bring the other pure-Python packages as wheels in .whl/ (once, on a machine with an index):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 -d .whl omegaconf==2.4.0 antlr4-python3-runtime==4.13.2 \
#     trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0
# vLLM is not among them (its wheel is far too large to carry): the vllm steps below skip without it.
# pytest runs with -o addopts="": setup.cfg's `-n 2` needs pytest-xdist, which the GPU machine lacks.
# GPU_PROOF_TINY=1 runs every part with tiny shapes (a CPU logic check of this script, not a measurement).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $PY -c 'import torch, transformers, accelerate, importlib.util as u
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__,
      "accelerate", accelerate.__version__, "gpus", torch.cuda.device_count(),
      *(f"{m} {u.find_spec(m) is not None}" for m in ("omegaconf", "trl", "datasets", "vllm")))'
  uptime; } 2>&1 | tee -a "$OUT/summary.txt"

# The CUDA tests (marker gpu) and the generator contract on torch-cuda, the PipelineRL run and the trl engine
# run side by side: each is bound by its Python host loop (the generators decode at ~60 ms a step on an
# H200, a few ms of it GPU work), so together they fit the time; their per-process memory is their own
# (bench_gpu.py counts a part's processes only). The native bench runs alone after them: its MFU and
# memory wall need the card to itself. NATIVE_ARGS=--skip-decode measures its train step and wall only.
SIDE_PARTS=${SIDE_PARTS-pipeline trl}  # which of them run beside the tests; SIDE_LIMIT and NATIVE_LIMIT in seconds
SIDE_LIMIT=${SIDE_LIMIT:-160}
NATIVE_LIMIT=${NATIVE_LIMIT:-100}
say "tests, ${SIDE_PARTS}: side by side (limit ${SIDE_LIMIT}s each)"
timeout "$SIDE_LIMIT" $PY -m pytest -q -p no:cacheprovider -o addopts="" -m "gpu or not slow" -k cuda -rA \
  tests/recipe/test_cuda.py tests/recipe/test_generator_contract.py > "$OUT/pytest.txt" 2>&1 &
TESTS_PID=$!
PIDS=()
for part in $SIDE_PARTS; do
  timeout "$SIDE_LIMIT" $PY -m benchmarks.bench_gpu "$part" $TINY > "$GPU_PROOF_WORK/$part.log" 2>&1 &
  PIDS+=("$part:$!")
done
for entry in "${PIDS[@]}"; do wait "${entry#*:}"; say "${entry%%:*}: exit $?"; done
wait $TESTS_PID; say "tests: exit $?; $(tail -1 "$OUT/pytest.txt")"
say "native: bench_gpu.py native ${NATIVE_ARGS:-} (limit ${NATIVE_LIMIT}s)"
timeout "$NATIVE_LIMIT" $PY -m benchmarks.bench_gpu native $TINY ${NATIVE_ARGS:-} > "$GPU_PROOF_WORK/native.log" 2>&1
say "native: exit $?"
# rollout.generator vllm on CUDA: the base recipe (PPO-off-policy-2) with its vLLM engine colocated with the trainer
# on the one GPU, then the generator contract on vllm-cuda. Only where vLLM's CUDA build is installed
# (pip install -e '.[vllm]'); the support table says "not verified on GPU" until this has run.
if $PY -c 'import vllm' 2>/dev/null; then
  say "vllm: sweep train rollout.generator=vllm on cuda (limit ${VLLM_LIMIT:-240}s)"
  timeout "${VLLM_LIMIT:-240}" $PY -m sweeps.cli train rollout.generator=vllm off_policy=ppo_off_policy off_policy.k=2 \
    max_steps=16 tracking.mlflow=false --device cuda --run-dir "$GPU_PROOF_WORK/vllm_run" > "$GPU_PROOF_WORK/vllm.log" 2>&1
  say "vllm: exit $?; $(tail -1 "$GPU_PROOF_WORK/vllm.log")"
  timeout 120 $PY -m pytest -q -p no:cacheprovider -o addopts="" -m "gpu or not slow" -k vllm-cuda \
    tests/recipe/test_generator_contract.py >> "$OUT/pytest.txt" 2>&1
  say "vllm contract: exit $?; $(tail -1 "$OUT/pytest.txt")"
else
  say "vllm: not installed here: rollout.generator vllm stays not verified on GPU"
fi
# One log for all parts (the device tool returns at most 8 files); a launched trl job's processes write theirs
# into the part's log too.
for part in $SIDE_PARTS native vllm; do [ -f "$GPU_PROOF_WORK/$part.log" ] || continue; echo "===== $part"; tail -c 200000 "$GPU_PROOF_WORK/$part.log"; done > "$OUT/run.log"
# A launched trl job's processes write launch.log in their run directory; its errors name the cause.
for log in "$GPU_PROOF_WORK"/trl_*/launch.log; do [ -f "$log" ] && { echo "===== $log"; grep -B2 -A12 -m3 "Error" "$log"; }
done >> "$OUT/run.log" 2>/dev/null
say "done"
