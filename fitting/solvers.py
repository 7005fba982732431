"""Numerical engines behind fit_sigmoid: the default grid-then-refine solver and the paper's grid search.

Both engines are built once per set of compute points and then solve for any pass-rate vector, so a
bootstrap reuses the precomputed grids and only pays for the solve. Public entry points live in fit.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

from fitting.curve import power_law_curve


@dataclass(frozen=True)
class Solution:
    """One solved sigmoid: its parameters and (weighted) sum of squared residuals over the window."""

    a: float
    b: float
    c_mid: float
    r0: float
    ssr: float


def _linear_fit(sum_s, sum_ss, sum_sy, n, sum_y, sum_yy, r0, a):
    """Best (R0, A) per grid point of (C_mid, B), closed form, with the fixed ones held.

    With s = 1 / (1 + (C_mid/C)^B) and u = 1 - s the model is y = R0 u + A s: linear in (R0, A).
    Sums over points: uy = Sy - Ssy, uu = n - 2 Ss + Sss, us = Ss - Sss, and
        SSR = Syy - 2 R0 uy - 2 A Ssy + R0^2 uu + 2 R0 A us + A^2 Sss.
    Solutions are clipped to their bounds (A in [R0, 1], R0 in [0, 1]); clipping a 2-D least-squares
    solution is not the constrained optimum, which is fine: these values only rank start points.
    """
    uy, uu, us = sum_y - sum_sy, n - 2 * sum_s + sum_ss, sum_s - sum_ss
    with np.errstate(divide="ignore", invalid="ignore"):
        if r0 is not None and a is None:
            # y - R0 = (A - R0) s  ->  A - R0 = S(s (y - R0)) / Sss
            gain = (sum_sy - r0 * sum_s) / sum_ss
            r0_hat = np.full_like(sum_s, r0)
            a_hat = np.clip(r0 + np.nan_to_num(gain), r0, 1.0)
        elif r0 is None and a is not None:
            # y - A s = R0 u  ->  R0 = S(u (y - A s)) / Suu
            a_hat = np.full_like(sum_s, a)
            r0_hat = np.clip(np.nan_to_num((uy - a * us) / uu), 0.0, a)
        elif r0 is None:
            det = uu * sum_ss - us * us
            r0_hat = np.clip(np.nan_to_num((uy * sum_ss - sum_sy * us) / det), 0.0, 1.0)
            a_hat = np.clip(np.nan_to_num((uu * sum_sy - us * uy) / det), 0.0, 1.0)
        else:
            r0_hat, a_hat = np.full_like(sum_s, r0), np.full_like(sum_s, a)
    ssr = (sum_yy - 2 * r0_hat * uy - 2 * a_hat * sum_sy + r0_hat**2 * uu
           + 2 * r0_hat * a_hat * us + a_hat**2 * sum_ss)
    return r0_hat, a_hat, ssr


POINTS_PER_BLOCK = 4096  # DefaultSolver._grid_sums


class DefaultSolver:
    """Grid over (ln C_mid, B) with A and R0 in closed form, then least-squares refinement of all parameters.

    Why: given (C_mid, B) the sigmoid is linear in (R0, A), so a dense 2-D grid (64 log-spaced C_mid x
    32 log-spaced B) with the linear parameters solved exactly sees the whole SSR surface at the cost of
    one matrix product, with no per-pair nonlinear solve. Up to three local minima of that grid start
    scipy.optimize.least_squares (trust-region reflective, analytic Jacobian) over (B, ln C_mid, A, R0)
    inside their bounds, so C_mid is continuous (no grid artefact) and B is bounded. A warm start
    (bootstrap refits) skips the grid.
    """

    n_c_mid_grid = 64
    n_b_grid = 32
    n_starts = 3

    def __init__(self, compute, *, r0, a, b_bounds, c_mid_bounds, weights=None):
        self.log_c = np.log(np.asarray(compute, dtype=float))
        self.n = self.log_c.size
        # least-squares weight per point (fit.point_weights); all 1 is the plain SSR
        self.weights = np.ones(self.n) if weights is None else np.asarray(weights, dtype=float)
        self.sqrt_weights = np.sqrt(self.weights)
        self.r0, self.a = r0, a
        self.b_bounds = b_bounds
        self.log_c_mid_bounds = (math.log(c_mid_bounds[0]), math.log(c_mid_bounds[1]))
        self.grid_log_c_mid = np.linspace(*self.log_c_mid_bounds, self.n_c_mid_grid)
        self.grid_b = np.geomspace(*b_bounds, self.n_b_grid)
        # weighted sums (every S below is S w_i ...), so the closed form is the weighted least squares
        w = self.weights
        self.sum_s, self.sum_ss = self._grid_sums(lambda s, rows: s @ w[rows], lambda s, rows: (s * s) @ w[rows])

    def _grid_sums(self, *products):
        """Each product(s, rows) summed over blocks of points: s is the sigmoid of every grid cell at the
        block's points, `rows` the block's slice of the point arrays.

        The grid's (C_mid x B, points) matrix is never held whole: in blocks of POINTS_PER_BLOCK points
        a block is 2,048 x 4,096 x 8 bytes = 64 MB, so memory stays bounded whatever the number of points
        (a curve of 50,000 points took 2.6 GB held whole).
        """
        totals = [0.0] * len(products)
        for start in range(0, self.n, POINTS_PER_BLOCK):
            log_c = self.log_c[start:start + POINTS_PER_BLOCK]
            z = self.grid_b[None, :, None] * (self.grid_log_c_mid[:, None, None] - log_c[None, None, :])
            block = expit(-z).reshape(-1, log_c.size)  # (C_mid x B, points of the block)
            rows = slice(start, start + log_c.size)
            totals = [total + product(block, rows) for total, product in zip(totals, products)]
        return totals

    def _grid_starts(self, y: np.ndarray) -> list[np.ndarray]:
        wy = self.weights * y
        (sum_sy,) = self._grid_sums(lambda s, rows: s @ wy[rows])
        r0_hat, a_hat, ssr = _linear_fit(self.sum_s, self.sum_ss, sum_sy, self.weights.sum(), wy.sum(),
                                         wy @ y, self.r0, self.a)
        surface = ssr.reshape(self.n_c_mid_grid, self.n_b_grid)
        # local minima of the surface: no smaller value among the 8 neighbours (edges padded with +inf)
        padded = np.pad(surface, 1, constant_values=np.inf)
        neighbours = np.stack([padded[1 + di:1 + di + surface.shape[0], 1 + dj:1 + dj + surface.shape[1]]
                               for di in (-1, 0, 1) for dj in (-1, 0, 1) if (di, dj) != (0, 0)])
        is_min = (surface <= neighbours.min(axis=0)).ravel()
        order = [g for g in np.argsort(ssr) if is_min[g]][: self.n_starts] or [int(np.argmin(ssr))]
        starts = []
        for g in order:
            i, j = divmod(int(g), self.n_b_grid)
            starts.append(self._pack(self.grid_b[j], self.grid_log_c_mid[i], a_hat[g], r0_hat[g]))
        return starts

    def _pack(self, b, log_c_mid, a, r0) -> np.ndarray:
        x = [b, log_c_mid]
        if self.a is None:
            x.append(a)
        if self.r0 is None:
            x.append(r0)
        return np.array(x, dtype=float)

    def _unpack(self, x):
        b, log_c_mid = x[0], x[1]
        k = 2
        a = self.a if self.a is not None else x[k]
        k += self.a is None
        r0 = self.r0 if self.r0 is not None else x[k]
        return b, log_c_mid, a, r0

    def _bounds(self):
        low, high = [self.b_bounds[0], self.log_c_mid_bounds[0]], [self.b_bounds[1], self.log_c_mid_bounds[1]]
        if self.a is None:
            low.append(self.r0 if self.r0 is not None else 0.0)
            high.append(1.0)
        if self.r0 is None:
            low.append(0.0)
            high.append(self.a if self.a is not None else 1.0)
        return np.array(low), np.array(high)

    def _residuals(self, x, y):
        b, log_c_mid, a, r0 = self._unpack(x)
        return self.sqrt_weights * (r0 + (a - r0) * expit(-b * (log_c_mid - self.log_c)) - y)

    def _jacobian(self, x, y):
        # dR/dB = -(A - R0) s (1 - s) (ln C_mid - ln C), dR/dlnC_mid = -(A - R0) s (1 - s) B,
        # dR/dA = s, dR/dR0 = 1 - s, with s = expit(-B (ln C_mid - ln C)).
        b, log_c_mid, a, r0 = self._unpack(x)
        delta = log_c_mid - self.log_c
        s = expit(-b * delta)
        slope = -(a - r0) * s * (1 - s)
        columns = [slope * delta, slope * b]
        if self.a is None:
            columns.append(s)
        if self.r0 is None:
            columns.append(1 - s)
        return self.sqrt_weights[:, None] * np.column_stack(columns)

    def solve(self, y, start: Solution | None = None) -> Solution:
        y = np.asarray(y, dtype=float)
        low, high = self._bounds()
        if start is not None:
            starts = [self._pack(start.b, math.log(start.c_mid), start.a, start.r0)]
        else:
            starts = self._grid_starts(y)
        best = None
        for x0 in starts:
            # least_squares needs a strictly feasible start; grid values may sit on a bound.
            x0 = np.clip(x0, low + 1e-9 * (high - low), high - 1e-9 * (high - low))
            result = least_squares(self._residuals, x0, jac=self._jacobian, bounds=(low, high), args=(y,),
                                   method="trf", x_scale="jac", ftol=1e-10, xtol=1e-10, gtol=1e-10,
                                   max_nfev=200)
            if best is None or result.cost < best.cost:
                best = result
        b, log_c_mid, a, r0 = self._unpack(best.x)
        return Solution(float(a), float(b), float(math.exp(log_c_mid)), float(r0), float(2 * best.cost))


class PaperSolver:
    """The paper's fit: grid over A (fixed step) x C_mid (linear values); B by least squares per pair.

    For every (A, C_mid) pair the SSR is evaluated on a 64-value log grid of B over b_bounds and the
    minimum over B estimated by a parabola through the best grid value and its neighbours (in ln B);
    the 20 best pairs then get B solved exactly (vectorised damped Newton) and the smallest
    SSR wins. So B is the per-pair least-squares value of the paper's
    curve_fit while A and C_mid stay on the paper's grid. R0 is always given.
    """

    n_b_grid = 64
    n_refine = 20

    def __init__(self, compute, *, r0, a, b_bounds, a_grid, c_mid_grid, weights=None):
        self.log_c = np.log(np.asarray(compute, dtype=float))
        self.weights = np.ones(self.log_c.size) if weights is None else np.asarray(weights, dtype=float)
        self.sqrt_weights = np.sqrt(self.weights)
        self.r0 = r0
        self.grid_a = np.array([a], dtype=float) if a is not None else np.asarray(a_grid, dtype=float)
        self.grid_c_mid = np.asarray(c_mid_grid, dtype=float)
        self.grid_b = np.geomspace(*b_bounds, self.n_b_grid)
        z = self.grid_b[None, :, None] * (np.log(self.grid_c_mid)[:, None, None] - self.log_c[None, None, :])
        self.grid_s = expit(-z)  # (C_mid, B, points)
        self.sum_ss = np.einsum("cbi,cbi,i->cb", self.grid_s, self.grid_s, self.weights)  # S w s^2
        gain = self.grid_a - r0
        self.valid_a = gain > 0  # A <= R0 is no rising sigmoid: excluded (fit_sigmoid ensures one is left)
        self.gain = gain[self.valid_a][:, None, None]
        self.gain_sq_ss = self.gain**2 * self.sum_ss[None]  # g^2 S(s^2), independent of the data
        self.two_gain = 2 * self.gain
        self._buffer = np.empty_like(self.gain_sq_ss)
        self._offsets = np.array([-1, 0, 1])

    def _refine_b(self, b, gain, log_c_mid, d):
        """Per-pair least-squares B for candidate pairs at once: damped Newton in B, within b_bounds.

        Residual r = sqrt(w) (d - g s) with s = expit(-B (ln C_mid - ln C)) and delta = ln C_mid - ln C:
            r' = sqrt(w) g s (1 - s) delta,   r'' = -sqrt(w) g s (1 - s) (1 - 2 s) delta^2,
        SSR' = 2 S(r r'), SSR'' = 2 S(r'^2 + r r''). Newton step -SSR'/SSR'' (Gauss-Newton, which drops
        r r'', where SSR'' <= 0); a step that does not lower the SSR is halved.
        """
        delta = log_c_mid[:, None] - self.log_c[None, :]

        def evaluate(b_values):
            s = expit(-b_values[:, None] * delta)
            residual = self.sqrt_weights * (d[None, :] - gain[:, None] * s)
            return s, residual, np.einsum("pi,pi->p", residual, residual)

        s, residual, ssr = evaluate(b)
        damping = np.ones_like(b)
        for _ in range(40):
            slope = self.sqrt_weights * gain[:, None] * s * (1 - s) * delta  # r'
            gradient = np.einsum("pi,pi->p", residual, slope)
            gauss_newton = np.einsum("pi,pi->p", slope, slope)
            curvature = gauss_newton - np.einsum("pi,pi->p", residual, slope * (1 - 2 * s) * delta)
            step = -gradient / np.where(curvature > 0, curvature, np.maximum(gauss_newton, 1e-300))
            trial = np.clip(b + damping * step, self.grid_b[0], self.grid_b[-1])
            done = np.abs(trial - b) <= 1e-8 * b
            if done.all():
                break
            s_new, residual_new, ssr_new = evaluate(trial)
            better = ssr_new < ssr
            b = np.where(better, trial, b)
            s = np.where(better[:, None], s_new, s)
            residual = np.where(better[:, None], residual_new, residual)
            ssr = np.where(better, ssr_new, ssr)
            damping = np.where(better, 1.0, damping / 2)
        return b, ssr

    def solve(self, y, start: Solution | None = None) -> Solution:
        d = np.asarray(y, dtype=float) - self.r0
        sum_sd = self.grid_s @ (self.weights * d)  # (C_mid, B)
        # SSR(A, C_mid, B) = S(w d^2) - 2 g S(w s d) + g^2 S(w s^2) with g = A - R0; the constant S(w d^2) is
        # left out for ranking. Written into a preallocated buffer: this is the hot loop of a bootstrap.
        ssr = np.multiply(self.two_gain, sum_sd[None], out=self._buffer)
        np.subtract(self.gain_sq_ss, ssr, out=ssr)
        k = ssr.argmin(axis=2)
        inner = np.clip(k, 1, self.n_b_grid - 2)
        f_lo, f_mid, f_hi = np.moveaxis(np.take_along_axis(ssr, inner[..., None] + self._offsets, axis=2), 2, 0)
        curvature = f_hi - 2 * f_mid + f_lo
        # minimum of the parabola through three equally spaced points (ln B is uniform on the grid)
        with np.errstate(divide="ignore", invalid="ignore"):
            vertex = np.where(curvature > 0, f_mid - (f_hi - f_lo) ** 2 / (8 * curvature), f_mid)
        pair_ssr = np.minimum(vertex, np.where(k == inner, f_mid, np.where(k < inner, f_lo, f_hi))).ravel()
        # the grid ranking is approximate (near-ties differ by less than its error), so the best
        # n_refine pairs all get their exact least-squares B before the smallest SSR is chosen.
        top = np.argpartition(pair_ssr, min(self.n_refine, pair_ssr.size) - 1)[: self.n_refine]
        i, j = np.unravel_index(top, k.shape)
        gain = self.gain[i, 0, 0]
        b, ssr_exact = self._refine_b(self.grid_b[k[i, j]], gain, np.log(self.grid_c_mid[j]), d)
        w = int(np.argmin(ssr_exact))
        a = float(self.grid_a[self.valid_a][i[w]])
        return Solution(a, float(b[w]), float(self.grid_c_mid[j[w]]), self.r0, float(ssr_exact[w]))


def log_c_mid_stderr(compute, solution: Solution, *, a_free: bool, r0_free: bool, weights=None) -> float:
    """Local standard error of ln C_mid: sqrt of its entry in sigma^2 (J^T W J)^-1, sigma^2 = SSR / (n - k).

    J is the Jacobian of the sigmoid in (B, ln C_mid[, A][, R0]) at the solution (columns as in
    DefaultSolver._jacobian), W the fit's point weights (SSR is the weighted one). A Gauss-Newton
    approximation, cheap enough for every fit; it feeds the window flag, while reported intervals come
    from the bootstrap. inf when n <= k.
    """
    log_c = np.log(np.asarray(compute, dtype=float))
    delta = math.log(solution.c_mid) - log_c
    s = expit(-solution.b * delta)
    slope = -(solution.a - solution.r0) * s * (1 - s)
    columns = [slope * delta, slope * solution.b] + ([s] if a_free else []) + ([1 - s] if r0_free else [])
    jac = np.column_stack(columns)
    if weights is not None:
        jac = np.sqrt(np.asarray(weights, dtype=float))[:, None] * jac
    dof = log_c.size - jac.shape[1]
    if dof <= 0:
        return math.inf
    covariance = solution.ssr / dof * np.linalg.pinv(jac.T @ jac)
    return float(math.sqrt(max(covariance[1, 1], 0.0)))


def solve_power_law(compute, y, b_bounds=(0.01, 5.0), a_bounds=(0.0, 1.0)):
    """Least-squares R = A - D / C^B: grid over B with (A, D) in closed form, then joint refinement.

    Returns (A, D, B, SSR). D >= 0 (the curve rises); A is bounded to a_bounds so an unbounded
    ceiling shows up as A at its upper bound rather than an arbitrarily large number.
    """
    compute, y = np.asarray(compute, dtype=float), np.asarray(y, dtype=float)
    grid_b = np.geomspace(*b_bounds, 64)
    basis = compute[None, :] ** -grid_b[:, None]  # C^-B per grid B
    # y = A - D x with x = C^-B: simple linear regression of y on x, slope -D.
    x_mean, y_mean = basis.mean(axis=1), y.mean()
    slope = ((basis - x_mean[:, None]) @ (y - y_mean)) / ((basis - x_mean[:, None]) ** 2).sum(axis=1)
    d_hat = np.clip(-slope, 0.0, None)
    a_hat = np.clip(y_mean + d_hat * x_mean, *a_bounds)
    ssr = ((a_hat[:, None] - d_hat[:, None] * basis - y[None, :]) ** 2).sum(axis=1)
    g = int(np.argmin(ssr))
    low, high = np.array([a_bounds[0], 0.0, b_bounds[0]]), np.array([a_bounds[1], np.inf, b_bounds[1]])
    x0 = np.clip([a_hat[g], d_hat[g], grid_b[g]], low + 1e-9, np.minimum(high - 1e-9, 1e300))

    def residuals(x):
        return power_law_curve(compute, *x) - y

    def jacobian(x):
        a, d, b = x
        powered = compute ** -b
        return np.column_stack([np.ones_like(compute), -powered, d * powered * np.log(compute)])

    result = least_squares(residuals, x0, jac=jacobian, bounds=(low, high), method="trf", x_scale="jac",
                           ftol=1e-10, xtol=1e-10, gtol=1e-10, max_nfev=500)
    a, d, b = (float(v) for v in result.x)
    return a, d, b, float(2 * result.cost)
