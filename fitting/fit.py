"""Fitting the sigmoid compute-performance curve (and the power-law baseline) over a window of one curve.

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

fit_sigmoid fits A, B, C_mid (and R0 when asked) on the points with burn_in <= C <= fit_until, C > 0.
The result carries its window points and settings, so bootstrap refits and fixed-A refits reproduce
exactly the same fit with other data or another fixed value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from fitting.curve import power_law_curve, sigmoid_curve
from fitting.flags import trust_flags
from fitting.solvers import DefaultSolver, PaperSolver, Solution, log_c_mid_stderr, solve_power_law
from fitting.validate import FitInputError, check_bounds, check_curve, check_point_count, check_r0, check_window

METHODS = ("default", "paper")
WEIGHTS = ("compute", "equal")
PAPER_A_RANGE = (0.450, 0.800)
PAPER_A_STEP = 0.005
PAPER_C_MID_RANGE = (100.0, 40000.0)  # GPU-hours, as in the paper
PAPER_N_C_MID = 100


@dataclass(frozen=True)
class FitSettings:
    """Everything that decides a fit besides the data; resolved (no None left except r0 / a)."""

    method: str
    r0: float | None  # None: R0 is fitted
    a: float | None  # None: A is fitted; a value: A fixed (LOO slope comparison)
    b_bounds: tuple[float, float]
    c_mid_bounds: tuple[float, float]  # default method: continuous bounds; paper: grid ends
    paper_a_grid: tuple[float, ...] = ()
    paper_n_c_mid: int = PAPER_N_C_MID
    weights: str = "compute"  # point_weights' scheme

    @property
    def n_params(self) -> int:
        return 2 + (self.a is None) + (self.r0 is None)

    def make_solver(self, compute: np.ndarray):
        """An engine for these settings on these compute points (grids precomputed once)."""
        weights = point_weights(compute, self.weights)
        if self.method == "paper":
            c_mid_grid = np.linspace(*self.c_mid_bounds, self.paper_n_c_mid)
            return PaperSolver(compute, r0=self.r0, a=self.a, b_bounds=self.b_bounds,
                               a_grid=self.paper_a_grid, c_mid_grid=c_mid_grid, weights=weights)
        return DefaultSolver(compute, r0=self.r0, a=self.a, b_bounds=self.b_bounds, c_mid_bounds=self.c_mid_bounds,
                             weights=weights)

    def a_bounds(self, r0: float) -> tuple[float, float]:
        if self.method == "paper":
            return (self.paper_a_grid[0], self.paper_a_grid[-1])
        return (r0 if self.r0 is not None else 0.0, 1.0)


@dataclass(frozen=True)
class FitResult:
    """A fitted sigmoid with its window, quality and trust flags. `flags` empty means no known problem."""

    a: float
    b: float
    c_mid: float
    r0: float
    r0_source: str  # "given", "compute_0" (the curve's point at C = 0) or "fitted"
    method: str
    ssr: float  # sum of squared residuals over the window, weighted (point_weights, mean 1)
    rmse: float
    n_points: int
    window: tuple[float, float]  # first and last compute inside the fit window
    c_mid_upper: float  # C_mid * exp(1.96 se(ln C_mid)), local approximate 95% upper bound
    flags: tuple[str, ...]
    settings: FitSettings = field(repr=False)
    compute: np.ndarray = field(repr=False, compare=False)  # window points, used by refits
    pass_rate: np.ndarray = field(repr=False, compare=False)

    @property
    def a_fixed(self) -> bool:
        return self.settings.a is not None

    def predict(self, compute) -> np.ndarray:
        """R(C) of this fit at any compute (array or scalar)."""
        return sigmoid_curve(compute, self.a, self.b, self.c_mid, self.r0)

    def solution(self) -> Solution:
        return Solution(self.a, self.b, self.c_mid, self.r0, self.ssr)


def point_weights(compute, scheme: str = "compute") -> np.ndarray:
    """The least-squares weight of each window point (ascending compute), mean 1.

    "compute": each point weighs the compute it stands for, half-way to each neighbour,
        w_i ~ (C_{i+1} - C_{i-1}) / 2, the two end points extended by half their one gap (the first
        cell clipped at C = 0). Why: the paper evaluates at an even compute spacing (every 100 steps),
        so its plain SSR weighs every stretch of compute alike. An evaluation schedule that is dense
        early (ours: steps 1..8, 10, 12, 15, ... then every 20) would otherwise give the first 3% of
        the window's compute a third of the points, and the early transient, which rises more slowly
        than the sigmoid, would bend the fitted ceiling down: on a validation hold-out (27 runs) the
        unweighted fits under-predicted the target by 0.019 on average, the weighted ones by 0.004,
        and runs within 0.02 rose from 44% to 78% (BENCHMARKS.md, "Each point weighs the compute it
        stands for"). On an evenly spaced schedule every weight is 1, which is exactly the paper's fit.
    "equal": every weight 1 (the plain SSR whatever the schedule).
    """
    c = np.asarray(compute, dtype=float)
    _check_weights(scheme)
    if scheme == "equal" or c.size < 2:
        return np.ones(c.size)
    middles = (c[1:] + c[:-1]) / 2
    edges = np.concatenate([[max(c[0] - (c[1] - c[0]) / 2, 0.0)], middles, [c[-1] + (c[-1] - c[-2]) / 2]])
    widths = np.diff(edges)
    return widths / widths.mean()


def _check_weights(scheme: str) -> None:
    if scheme not in WEIGHTS:
        raise FitInputError(f"weights must be one of {', '.join(WEIGHTS)}; got {scheme!r}")


def _paper_a_grid(a_range, a_step: float) -> tuple[float, ...]:
    low, high = check_bounds("paper_a_range", a_range, positive=False)
    if not (math.isfinite(a_step) and a_step > 0):
        raise FitInputError(f"paper_a_step must be > 0; got {a_step!r}")
    count = int(math.floor((high - low) / a_step + 1e-9)) + 1
    # rounded to the step's decimals so that 0.450 + 7 * 0.005 prints and compares as 0.485
    decimals = max(0, -math.floor(math.log10(a_step)) + 3)
    return tuple(round(low + k * a_step, decimals) for k in range(count))


def window_method_options(method: str) -> dict:
    """fit_sigmoid's settings for a sweep's `budget.fit_method`, every range derived from the fit window.

    "default": C_mid continuous in (first C / 100, last C x 100); "paper": the paper's grid with C_mid
    on (first C / 15, last C x 5) and A on (R0, 1] (no GPU-hour defaults: sweeps fit in any unit).
    """
    if method not in METHODS:
        raise FitInputError(f"fit method must be one of {', '.join(METHODS)}; got {method!r}")
    if method == "paper":
        return {"method": "paper", "paper_c_mid_range": None, "paper_a_range": None}
    return {"method": "default", "c_mid_bounds": None}


def fit_sigmoid(compute, pass_rate, *, r0: float | None = None, fit_r0: bool = False, a: float | None = None,
                burn_in: float = 0.0, fit_until: float = math.inf, method: str = "default",
                b_bounds: tuple[float, float] = (0.1, 10.0), c_mid_bounds: tuple[float, float] | None = None,
                paper_a_range: tuple[float, float] | None = PAPER_A_RANGE, paper_a_step: float = PAPER_A_STEP,
                paper_c_mid_range: tuple[float, float] | None = PAPER_C_MID_RANGE,
                paper_n_c_mid: int = PAPER_N_C_MID, weights: str = "compute") -> FitResult:
    """Fit R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) on the points with burn_in <= C <= fit_until, C > 0.

    R0: a fitted parameter in [0, 1] when fit_r0=True; else `r0` (the step-0 evaluation) when given; else
    the pass rate of the curve's point at C = 0 (r0_source says which). `a` fixes the asymptote.
    Points at C = 0 never enter the window. The result's flags (flags.FLAG_MEANINGS) name the known
    reasons not to trust it; bad input raises FitInputError instead of returning a number.

    method="default": grid over (ln C_mid, B) with A, R0 in closed form, refined by bounded least squares
    over all free parameters (see solvers.DefaultSolver). C_mid is continuous in c_mid_bounds, default
    (first window C / 100, last window C * 100); B in b_bounds; A in [R0, 1].
    method="paper": the paper's grid: A over paper_a_range in paper_a_step steps (default 0.450..0.800
    by 0.005), C_mid over paper_n_c_mid linear values on paper_c_mid_range (default [100, 40000]
    GPU-hours), B by least squares per pair, smallest SSR wins. Those defaults assume GPU-hours: pass
    paper_c_mid_range=None to derive it from the window, (first C / 15, last C * 5), which gives
    exactly [100, 40000] for the paper's [1500, 8000] window; paper_a_range=None gives (R0, 1].

    weights: "compute" (each point weighs the compute half-way to its neighbours, see point_weights;
    all 1 on an evenly spaced schedule) or "equal". Both methods minimise the weighted SSR.
    """
    c, y = check_curve(compute, pass_rate)
    check_window(burn_in, fit_until)
    if method not in METHODS:
        raise FitInputError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if fit_r0:
        if r0 is not None:
            raise FitInputError("pass either r0 (R0 given) or fit_r0=True (R0 fitted), not both")
        if method == "paper":
            raise FitInputError(
                "method='paper' takes R0 as given (the paper's fit); drop fit_r0 or use method='default'"
            )
        r0_value, r0_source = None, "fitted"
    elif r0 is not None:
        r0_value, r0_source = check_r0(r0), "given"
    elif c.size and c[0] == 0:
        r0_value, r0_source = check_r0(float(y[0])), "compute_0"
    else:
        raise FitInputError(
            "R0 is unknown: pass r0= (the step-0 pass rate), include a point at compute 0, or set fit_r0=True"
        )
    if a is not None:
        if not (isinstance(a, (int, float, np.floating)) and math.isfinite(a) and 0 < a <= 1):
            raise FitInputError(f"a (fixed asymptote) must be in (0, 1]; got {a!r}")
        if r0_value is not None and a <= r0_value:
            raise FitInputError(f"a (fixed asymptote) must exceed r0; got a={a!r}, r0={r0_value!r}")
        a = float(a)
    b_bounds = check_bounds("b_bounds", b_bounds)
    _check_weights(weights)

    inside = (c >= burn_in) & (c <= fit_until) & (c > 0)
    c_w, y_w = c[inside], y[inside]
    window = (float(c_w[0]), float(c_w[-1])) if c_w.size else (float(burn_in), float(fit_until))
    n_params = 2 + (a is None) + (r0_value is None)
    check_point_count(c_w.size, n_params, window)

    if method == "paper":
        if paper_c_mid_range is None:
            paper_c_mid_range = (window[0] / 15, window[1] * 5)
        c_mid_range = check_bounds("paper_c_mid_range", paper_c_mid_range)
        if paper_a_range is None:
            paper_a_range = (math.ceil((r0_value + 1e-9) / paper_a_step) * paper_a_step, 1.0)
        a_grid = _paper_a_grid(paper_a_range, paper_a_step)
        if a is None and a_grid[-1] <= r0_value:
            raise FitInputError(
                f"paper_a_range {paper_a_range!r} lies at or below r0 = {r0_value:g}: no rising sigmoid on the grid; "
                "pass a range above r0, or paper_a_range=None to derive it from R0"
            )
        if int(paper_n_c_mid) < 2:
            raise FitInputError(f"paper_n_c_mid must be >= 2; got {paper_n_c_mid!r}")
        settings = FitSettings("paper", r0_value, a, b_bounds, c_mid_range, a_grid, int(paper_n_c_mid), weights)
    else:
        if c_mid_bounds is None:
            c_mid_bounds = (window[0] / 100, window[1] * 100)
        settings = FitSettings("default", r0_value, a, b_bounds, check_bounds("c_mid_bounds", c_mid_bounds),
                               weights=weights)
    return _fit_window(c_w, y_w, settings, r0_source)


def _fit_window(c_w: np.ndarray, y_w: np.ndarray, settings: FitSettings, r0_source: str) -> FitResult:
    """Solve on the window points and wrap the Solution into a FitResult with its flags."""
    solver = settings.make_solver(c_w)
    solution = solver.solve(y_w)
    se = log_c_mid_stderr(c_w, solution, a_free=settings.a is None, r0_free=settings.r0 is None,
                          weights=solver.weights)
    c_mid_upper = solution.c_mid * math.exp(min(1.96 * se, 700.0))
    flags = trust_flags(compute=c_w, pass_rate=y_w, a=solution.a, b=solution.b, c_mid=solution.c_mid,
                        c_mid_upper=c_mid_upper, r0=solution.r0, n_params=settings.n_params,
                        a_free=settings.a is None,
                        b_bounds=settings.b_bounds, c_mid_bounds=settings.c_mid_bounds,
                        a_bounds=settings.a_bounds(solution.r0))
    return FitResult(a=solution.a, b=solution.b, c_mid=solution.c_mid, r0=solution.r0, r0_source=r0_source,
                     method=settings.method, ssr=solution.ssr, rmse=math.sqrt(solution.ssr / c_w.size),
                     n_points=int(c_w.size), window=(float(c_w[0]), float(c_w[-1])),
                     c_mid_upper=c_mid_upper, flags=flags,
                     settings=settings, compute=c_w, pass_rate=y_w)


def refit_fixed_a(fit: FitResult, a: float) -> FitResult:
    """The same fit (window, method, R0 handling, bounds) with the asymptote fixed to `a`."""
    if not (math.isfinite(a) and 0 < a <= 1) or (fit.settings.r0 is not None and a <= fit.settings.r0):
        raise FitInputError(f"fixed a must be in (r0, 1]; got a={a!r}, r0={fit.r0!r}")
    return _fit_window(fit.compute, fit.pass_rate, dataclasses.replace(fit.settings, a=float(a)), fit.r0_source)


@dataclass(frozen=True)
class PowerLawFit:
    """R(C) = A - D / C^B fitted on a window; A is bounded to [0, 1], so a_at_bound means 'no ceiling'."""

    a: float
    d: float
    b: float
    ssr: float
    n_points: int
    window: tuple[float, float]

    @property
    def a_at_bound(self) -> bool:
        return self.a >= 1 - 1e-6

    def predict(self, compute) -> np.ndarray:
        return power_law_curve(compute, self.a, self.d, self.b)


def fit_power_law(compute, pass_rate, *, burn_in: float = 0.0, fit_until: float = math.inf) -> PowerLawFit:
    """Fit the power-law baseline R = A - D / C^B on the same window rule as fit_sigmoid (C > 0).

    The paper shows this form misjudges the ceiling of a saturating curve (A = 1.0 where the
    sigmoid finds 0.645); it is here for that comparison, not as an alternative fit.
    """
    c, y = check_curve(compute, pass_rate)
    check_window(burn_in, fit_until)
    inside = (c >= burn_in) & (c <= fit_until) & (c > 0)
    c_w, y_w = c[inside], y[inside]
    window = (float(c_w[0]), float(c_w[-1])) if c_w.size else (float(burn_in), float(fit_until))
    check_point_count(c_w.size, 3, window)
    a, d, b, ssr = solve_power_law(c_w, y_w)
    return PowerLawFit(a=a, d=d, b=b, ssr=ssr, n_points=int(c_w.size), window=window)
