"""Does the sigmoid bend where the curves do? A sweep-level check of the fits at the window's end.

A fit extrapolates from the last points of its window, so that is where a wrong shape shows first.
Each run's fit leaves residuals r_i = R_i - R(C_i); over the window's last LAST_POINTS points their
mean is above or below zero. When the sigmoid describes the curves, each run's sign is a coin flip
(evaluation noise); when the curves keep rising faster than their fits (the fit bends too early),
most runs end their window above it and the predictions at the target come out too low. One run
cannot tell (3 noisy points), a sweep can: a two-sided sign test over its runs,
    p = P(|Binomial(n, 1/2) - n/2| >= |above - n/2|),
and at p < ALPHA the report says in which direction its predictions are likely biased. It needs
at least 8 runs to ever fire at ALPHA = 0.01 (7 runs of one sign give p = 0.016).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

LAST_POINTS = 3
ALPHA = 0.01


@dataclass(frozen=True)
class ShapeCheck:
    """Runs whose last window points lie above / below their own fit, and the sign test's p-value."""

    runs: int
    above: int
    p_value: float

    @property
    def biased(self) -> bool:
        return self.p_value < ALPHA

    @property
    def mostly_above(self) -> bool:
        """Most runs end their window above their fit (the curves outrun the sigmoid)."""
        return 2 * self.above > self.runs

    @property
    def predictions_likely(self) -> str:
        """'too low' when the curves end above their fits, 'too high' when below."""
        return "too low" if self.mostly_above else "too high"

    def note(self) -> str:
        side, count, bends, bound = (("above", self.above, "earlier", "lower") if self.mostly_above
                                     else ("below", self.runs - self.above, "later", "upper"))
        return (f"fit shape: {count} of {self.runs} runs end their fit window {side} their own sigmoid fit "
                f"(last {LAST_POINTS} points; sign test p = {self.p_value:.1g}): the sigmoid bends {bends} than "
                f"these curves, so predictions at the target are likely {self.predictions_likely}. Read them as "
                f"{bound} bounds, or fit a longer window.")


def window_end_check(fits: Iterable, last_points: int = LAST_POINTS) -> ShapeCheck | None:
    """The sign test over `fits` (fitting.FitResult, one per run); None when no fit has enough points.

    A fit counts when its window holds more points than its free parameters plus `last_points`;
    a mean residual of exactly 0 counts for neither side.
    """
    from scipy.stats import binomtest

    signs = []
    for fit in fits:
        if fit is None or fit.n_points < fit.settings.n_params + last_points + 1:
            continue
        residual = float((fit.pass_rate[-last_points:] - fit.predict(fit.compute[-last_points:])).mean())
        if residual != 0.0:
            signs.append(residual > 0)
    if not signs:
        return None
    above = sum(signs)
    return ShapeCheck(runs=len(signs), above=above, p_value=float(binomtest(above, len(signs), 0.5).pvalue))
