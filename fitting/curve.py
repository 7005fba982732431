"""The compute-performance curves (sigmoid, power law) and the log F transform of the slope plot.

Notation (Eq. 1 in section 2 of arXiv 2510.13786): C compute (GPU-hours in the paper), R mean pass
rate, R0 the pass rate at zero RL compute, A the asymptote, B the efficiency exponent, C_mid the
compute at half the gain A - R0.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit


def sigmoid_curve(compute, a: float, b: float, c_mid: float, r0: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), the paper's sigmoid.

    Evaluated as R0 + (A - R0) * expit(-B (ln C_mid - ln C)) so that neither C -> 0 nor a large B
    overflows; R(0) = R0 exactly. Accepts scalars or arrays; returns an array.
    """
    compute = np.asarray(compute, dtype=float)
    with np.errstate(divide="ignore"):
        z = b * (np.log(c_mid) - np.log(compute))  # ln((C_mid / C)^B); +inf at C = 0, where expit(-inf) = 0
    return r0 + (a - r0) * expit(-z)


def power_law_curve(compute, a: float, d: float, b: float) -> np.ndarray:
    """R(C) = A - D / C^B, the power-law baseline the paper compares against (Figure 2 of the paper)."""
    compute = np.asarray(compute, dtype=float)
    return a - d * np.power(compute, -b)


def log_f(compute, pass_rate, a: float, b: float, c_mid: float, r0: float) -> np.ndarray:
    """log F(R) = log(C_mid^B / ((A - R0)/(R - R0) - 1)) per point, for the LOO slope plot.

    On the fitted curve F(R) = C^B, so log F against log C is a line of slope B. The identity
    (A - R0)/(R - R0) - 1 = (A - R)/(R - R0) gives the stable form
        log F = B log C_mid + log(R - R0) - log(A - R).
    Points with R >= A or R <= R0 have no F; they come back as NaN (never clipped, so a caller sees
    how many points the fixed A leaves undefined). `compute` only fixes the output shape.
    """
    pass_rate = np.asarray(pass_rate, dtype=float)
    compute = np.broadcast_to(np.asarray(compute, dtype=float), pass_rate.shape)
    out = np.full(compute.shape, np.nan)
    defined = (pass_rate > r0) & (pass_rate < a)
    out[defined] = b * np.log(c_mid) + np.log(pass_rate[defined] - r0) - np.log(a - pass_rate[defined])
    return out
