"""The maintained benchmarks, each run from the repository root as `python -m benchmarks.NAME` (README.md here)."""
