"""Input checks for curves and fit arguments: every error names the argument, the bad value and the fix."""

from __future__ import annotations

import math

import numpy as np


class FitInputError(ValueError):
    """A curve or fit argument that cannot be fitted as given; the message says what to change."""


def _first_indices(mask: np.ndarray, limit: int = 3) -> str:
    indices = np.flatnonzero(mask)
    shown = ", ".join(str(i) for i in indices[:limit])
    return shown + (f" (and {indices.size - limit} more)" if indices.size > limit else "")


def check_curve(compute, pass_rate) -> tuple[np.ndarray, np.ndarray]:
    """Return (compute, pass_rate) as 1-D float arrays after checking they form one curve.

    A curve is one run and one seed: finite values, compute >= 0 and strictly increasing (0 is allowed
    only as the step-0 evaluation), pass rates in [0, 1]. Nothing is dropped or reordered silently:
    the caller decides what a NaN or an unsorted row means.
    """
    c = np.asarray(compute, dtype=float)
    y = np.asarray(pass_rate, dtype=float)
    if c.ndim != 1 or y.ndim != 1:
        raise FitInputError(f"compute and pass_rate must be 1-D; got shapes {c.shape} and {y.shape}")
    if c.size != y.size:
        raise FitInputError(
            f"compute has {c.size} values but pass_rate has {y.size}; pass one pass rate per compute value"
        )
    for name, values in (("compute", c), ("pass_rate", y)):
        bad = ~np.isfinite(values)
        if bad.any():
            raise FitInputError(
                f"{name} has {int(bad.sum())} non-finite value(s) (NaN or inf) at index {_first_indices(bad)}; "
                "drop those evaluation points (missing evaluations) or fix the export"
            )
    if (c < 0).any():
        bad = c < 0
        raise FitInputError(
            f"compute must be >= 0; got {c[bad][0]:g} at index {_first_indices(bad)}; "
            "compute is cumulative RL compute (e.g. GPU-hours) since step 0"
        )
    steps = np.diff(c)
    if (steps == 0).any():
        i = int(np.flatnonzero(steps == 0)[0])
        raise FitInputError(
            f"compute has a duplicate value {c[i]:g} at indices {i} and {i + 1}: several seeds or runs "
            "mixed into one curve? fit each seed separately (a 'seed' column) or average them first"
        )
    if (steps < 0).any():
        i = int(np.flatnonzero(steps < 0)[0])
        raise FitInputError(
            f"compute must be increasing; got {c[i + 1]:g} after {c[i]:g} at index {i + 1}: "
            "sort the curve by compute, or check for a restarted run whose compute counter was reset"
        )
    outside = (y < 0) | (y > 1)
    if outside.any():
        raise FitInputError(
            f"pass_rate must lie in [0, 1]; got {y[outside][0]:g} at index {_first_indices(outside)}"
            + ("; percentages? divide by 100" if y.max() > 1 and y.max() <= 100 else "")
        )
    return c, y


def check_r0(r0: float) -> float:
    """R0 is a pass rate below 1 (at R0 = 1 there is no gain to fit)."""
    if not isinstance(r0, (int, float, np.floating, np.integer)) or not math.isfinite(r0) or not 0 <= r0 < 1:
        raise FitInputError(f"r0 must be a pass rate in [0, 1); got {r0!r}")
    return float(r0)


def check_window(burn_in: float, fit_until: float) -> None:
    """The fit window [burn_in, fit_until] must be a non-empty compute interval."""
    if not math.isfinite(burn_in) or burn_in < 0:
        raise FitInputError(f"burn_in must be a finite compute value >= 0; got {burn_in!r}")
    if math.isnan(fit_until) or fit_until <= burn_in:
        raise FitInputError(
            f"fit_until must exceed burn_in; got fit_until={fit_until!r}, burn_in={burn_in!r}"
        )


def check_point_count(n_points: int, n_params: int, window: tuple[float, float]) -> None:
    """A fit needs at least as many points as free parameters (fewer leaves it undetermined)."""
    if n_points < n_params:
        raise FitInputError(
            f"the fit window [{window[0]:g}, {window[1]:g}] holds {n_points} point(s) with compute > 0 "
            f"but the fit has {n_params} free parameters; widen the window (burn_in / fit_until) "
            "or evaluate more often"
        )


def check_bounds(name: str, bounds: tuple[float, float], positive: bool = True) -> tuple[float, float]:
    """A (low, high) pair with low < high, both finite (and > 0 where the parameter is a scale)."""
    try:
        low, high = (float(v) for v in bounds)
    except (TypeError, ValueError):
        raise FitInputError(f"{name} must be a (low, high) pair of numbers; got {bounds!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high) or (positive and low <= 0):
        raise FitInputError(
            f"{name} must be finite with {'0 < ' if positive else ''}low < high; got {bounds!r}"
        )
    return low, high
