# Sourced by benchmarks/gpu_proof.sh and benchmarks/gpu_decode_proof.sh from the repository root: $OUT, the
# work directory, the interpreter, say() (a timed line into $OUT/summary.txt), and the carried wheels (.whl/)
# installed and on PYTHONPATH with the repository (the GPU machine has no package index: gpu_proof.sh says which).
OUT=${OUT:-/tmp/gpu_proof}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export GPU_PROOF_WORK=${GPU_PROOF_WORK:-/tmp/gpu_proof_work}
PY=${PY:-python3}
TINY=${GPU_PROOF_TINY:+--tiny}
START=$(date +%s)
say() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt"; }
rm -rf "$GPU_PROOF_WORK"; mkdir -p "$GPU_PROOF_WORK"
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpu_proof_site .whl/*.whl \
    && export PYTHONPATH="/tmp/gpu_proof_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
