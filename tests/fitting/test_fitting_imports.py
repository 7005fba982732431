"""fitting/ is pure numpy/scipy/pandas: importing it (and running a fit) never loads torch."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = ["fitting", "fitting.curve", "fitting.fit", "fitting.solvers", "fitting.flags", "fitting.validate",
           "fitting.uncertainty", "fitting.extrapolation", "fitting.compare", "sweeps.fit_command"]


def test_fitting_never_imports_torch():
    code = (
        "import sys, importlib, numpy as np\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "from fitting import fit_sigmoid, bootstrap_fit, sigmoid_curve\n"
        "c = np.arange(0.0, 8001.0, 100.0)\n"
        "bootstrap_fit(fit_sigmoid(c, sigmoid_curve(c, 0.61, 1.92, 2542, 0.3)), n_boot=5)\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
