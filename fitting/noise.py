"""Is the evaluation precise enough to score a prediction at the margin? A sweep-level check.

Each evaluation point is mean@k over a fixed prompt set, and its sampling alone moves it: the run
logs that standard error with every point (recipe.evaluation.sampling_standard_error,
se = sqrt(sum_i q_i (1 - q_i) / (k - 1)) / N). A prediction at the target is scored against one
such point and extrapolates from a window of them, and with eval.draws "common" (the default)
every evaluation of a run draws from the same random stream (common random numbers), so a point's
sampling error persists into the next points instead of averaging out over the window.

How precise is enough, measured on the embedded testbed (benchmarks/bench_eval_noise.py;
BENCHMARKS.md, "Evaluation noise"): each run of a validation study was replaced by its own sigmoid fitted over the
whole run plus noise of sd sigma, correlated from point to point as the runs' residuals are (lag-1
autocorrelation 0.61), then fitted on the window and scored at the target. The share of predictions
within the 0.02 margin was 44% at sigma 0.018 (the shipped 128 prompts x 4 samples: 0.012-0.02),
61% at 0.012, 78% at 0.008, 89% at 0.006 and 96% at 0.005. So a sweep whose median se exceeds
SE_LIMIT = margin / 4 cannot be expected to predict its runs to the margin, whatever the fit: the
report says so and names the fix, more prompts or more samples (se falls as 1 / sqrt(prompts x samples)).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from fitting.extrapolation import DEFAULT_MARGIN as MARGIN  # the paper's noise margin, 0.02

SE_LIMIT = MARGIN / 4


@dataclass(frozen=True)
class EvaluationNoise:
    """The median sampling standard error of a sweep's evaluation points, against SE_LIMIT."""

    points: int
    median_se: float
    limit: float = SE_LIMIT

    @property
    def too_noisy(self) -> bool:
        return self.median_se > self.limit

    @property
    def samples_factor(self) -> float:
        """How many times the evaluation's prompts x samples would bring the median se to the limit."""
        return (self.median_se / self.limit) ** 2

    def note(self) -> str:
        return (f"evaluation noise: one evaluation's pass rate has a sampling standard error of "
                f"{self.median_se:.3f} (median over {self.points} points), more than a quarter of the "
                f"{MARGIN} margin ({self.limit:.3f}): at that noise single-run predictions cannot be "
                f"expected within the margin, whatever the fit (with eval.draws common the error also persists "
                f"from point to point). Evaluate ~{math.ceil(self.samples_factor)}x "
                f"the prompts x samples: raise eval.num_prompts (up to task.validation_size) or "
                f"eval.samples_per_prompt.")


def evaluation_noise_check(standard_errors: Iterable[float]) -> EvaluationNoise | None:
    """The check over a sweep's points' logged standard errors; None when no point logged a finite one
    (runs that predate the metric, or k = 1)."""
    values = [float(se) for se in standard_errors if se is not None and math.isfinite(float(se))]
    if not values:
        return None
    return EvaluationNoise(points=len(values), median_se=statistics.median(values))
