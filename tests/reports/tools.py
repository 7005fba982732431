"""Outside tools the report tests look through: pdftoppm and headless Chromium, installed on demand."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.services import could_not_provide, may_install_system_packages, no_install_reason

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def ensure_tool(tool: str, script: str) -> str:
    """The tool's path, installing it with scripts/<script> when missing and allowed (tests.services): a skip
    when not allowed, a failure when allowed and the install fails."""
    if shutil.which(tool) is None:
        if not may_install_system_packages():
            pytest.skip(no_install_reason(tool))
        # scripts/apt-install.sh waits up to 600 s for another install's lock, then installs (pytest-timeout: 900).
        try:
            result = subprocess.run(["sh", str(SCRIPTS / script)], capture_output=True, text=True, timeout=850)
        except subprocess.TimeoutExpired:
            could_not_provide(tool, f"scripts/{script} ran past 850 s")
        if result.returncode != 0 or shutil.which(tool) is None:
            could_not_provide(tool, f"scripts/{script} failed: {(result.stderr or result.stdout)[-300:]}")
    return shutil.which(tool)


def chromium(url: str, profile: Path, *, screenshot: Path | None = None, size: str = "1600,1000") -> str:
    """Load `url` in headless Chromium (flags from shared/SERVICES.md); save a screenshot or return the DOM."""
    binary = ensure_tool("chromium", "install-chromium.sh")
    # The runs table is a JavaScript app: without a virtual-time budget the capture happens before it renders.
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               f"--user-data-dir={profile}", "--virtual-time-budget=15000", f"--window-size={size}"]
    command += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    result = subprocess.run(command + [url], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def ink_fraction(png: Path, white: float = 0.95) -> float:
    """Fraction of pixels that are not (near) white: 0 for a blank page."""
    import matplotlib.image

    pixels = matplotlib.image.imread(str(png))[..., :3]
    if pixels.dtype != np.float32 and pixels.max() > 1:
        pixels = pixels / 255.0
    return float((pixels.min(axis=-1) < white).mean())
