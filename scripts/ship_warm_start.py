"""Build the base recipe's warm start on this machine and ship it in recipe/warm_starts/<key>/.

    .venv/bin/python scripts/ship_warm_start.py

Run it (and commit the result) when what determines the warm start changes: the procedure
(recipe.warm_start.WARM_START_VERSION), the base recipe's `model` or `warm_start` sections, the
task's digits or the interruption phrase (the tokenizer's added token). tests/recipe/test_warm_start.py
fails while the shipped key is not the base recipe's. The build always runs here (never copied from a
cache), takes ~4 minutes on 2 cores, and replaces the previously shipped warm start; its
warm_start.json records where and with what it was built.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path


def main() -> int:
    import torch
    import transformers

    from recipe.config import load_recipe
    from recipe.machine import cpu_model
    from recipe.warm_start import SHIPPED_DIR, build_warm_start, warm_start_key

    torch.set_num_threads(2)
    cfg = load_recipe()
    key = warm_start_key(cfg.model, cfg.warm_start, cfg.task)
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / key
        print(f"building warm start {key} ({cfg.warm_start.steps} steps)", file=sys.stderr, flush=True)
        build_warm_start(cfg.model, cfg.warm_start, cfg.task, staging, log_every=100)
        info = json.loads((staging / "warm_start.json").read_text())
        info.update({"key": key, "built_on": cpu_model(), "machine": platform.machine(),
                     "torch": torch.__version__, "transformers": transformers.__version__,
                     "built_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})
        (staging / "warm_start.json").write_text(json.dumps(info, indent=2) + "\n")
        shutil.rmtree(SHIPPED_DIR, ignore_errors=True)
        SHIPPED_DIR.mkdir(parents=True)
        shutil.copytree(staging, SHIPPED_DIR / key)
    print(f"shipped {SHIPPED_DIR / key}: {json.dumps(info)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
