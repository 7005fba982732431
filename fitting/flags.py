"""Trust flags: short names for the reasons a fitted curve should not be believed as is."""

from __future__ import annotations

import numpy as np

# flag -> what it means for the reader of a fit table. A fit without flags is not proven right,
# but each flag names a known way for the fit to be wrong.
FLAG_MEANINGS: dict[str, str] = {
    "too_few_points": "fewer than 3 points per free parameter in the fit window",
    "window_ends_before_c_mid": "C_mid (or its approximate 95% upper bound) lies beyond the fit window: "
                                "less than half the gain may be observed, A poorly determined",
    "b_at_bound": "B sits at its bound: the bound, not the data, set it",
    "c_mid_at_bound": "C_mid sits at its bound (or the paper grid's edge)",
    "a_at_bound": "A sits at its bound (1, R0, or the paper grid's edge): ceiling not determined",
    "not_increasing": "pass rate does not increase with compute over the window (or fitted A <= R0)",
    "flat_curve": "pass rate rises less than 0.01 across the window (trend line): B and C_mid undetermined",
    "no_observation_at_target": "no evaluation point near the target compute, so the prediction is unscored",
    "c_mid_ci_beyond_window": "bootstrap C_mid interval reaches beyond the fit window: A may be poorly determined",
    "a_ci_at_bound": "bootstrap A interval reaches A's bound (1, R0, or the paper grid's edge): the data cannot "
                     "tell the ceiling from the bound, so no ceiling claim",
}

POINTS_PER_PARAMETER = 3
FLAT_RISE = 0.01  # half the 0.02 margin on A: a window with less growth cannot place B or C_mid
_REL_TOL = 1e-4


def at_bound(value: float, bound: float) -> bool:
    """value equals bound up to a relative 1e-4 (a solver stops at a bound within its tolerance)."""
    return abs(value - bound) <= _REL_TOL * max(abs(bound), 1e-12)


def trust_flags(*, compute: np.ndarray, pass_rate: np.ndarray, a: float, b: float, c_mid: float,
                c_mid_upper: float, r0: float,
                n_params: int, a_free: bool, b_bounds: tuple[float, float],
                c_mid_bounds: tuple[float, float], a_bounds: tuple[float, float]) -> tuple[str, ...]:
    """Flags for one sigmoid fit on window points (compute, pass_rate), in FLAG_MEANINGS order.

    window_ends_before_c_mid uses the upper bound too: with noise the point estimate of a C_mid just
    beyond the window often lands inside it (about 3 draws in 10 for the paper's 32k-gen row fitted on
    [1500, 8000]), the upper bound rarely does. not_increasing and flat_curve read the data, not the
    fit: the least-squares line of pass rate on ln C over the window rises by <= 0 (or the fitted
    A <= R0), resp. by less than FLAT_RISE, between the first and last window point, so one noisy dip
    does not trigger them.
    """
    flags = set()
    if compute.size < POINTS_PER_PARAMETER * n_params:
        flags.add("too_few_points")
    if max(c_mid, c_mid_upper) > compute[-1]:
        flags.add("window_ends_before_c_mid")
    if any(at_bound(b, bound) for bound in b_bounds):
        flags.add("b_at_bound")
    if any(at_bound(c_mid, bound) for bound in c_mid_bounds):
        flags.add("c_mid_at_bound")
    if a_free and any(at_bound(a, bound) for bound in a_bounds):
        flags.add("a_at_bound")
    if compute.size > 1:
        # rise of the least-squares line of R on ln C between the first and last window point
        log_c = np.log(compute)
        centred = log_c - log_c.mean()
        slope = float(centred @ (pass_rate - pass_rate.mean())) / float(centred @ centred)
        rise = slope * (log_c[-1] - log_c[0])
    else:
        rise = 0.0
    if rise <= 0 or a <= r0:
        flags.add("not_increasing")
    if rise < FLAT_RISE:
        flags.add("flat_curve")
    return tuple(name for name in FLAG_MEANINGS if name in flags)

