"""Seeds as the unit of evidence: paired effects against the base, honest intervals, MDE and verdicts.

A LOO sweep runs the base and every variant on the same seeds (same warm start, prompt order and
sampling seed), so each seed s gives a paired difference d_s = q(variant, s) - q(base, s) of a
quantity q read from that seed's own fit (A, the pass rate predicted at the target, the compute to
reach a level). Run-to-run variation is in the spread of the d_s; the residual bootstrap of one
curve never sees it.

Interval: a paired t-interval with the run-to-run variance of the whole sweep, estimated from the
two-way (recipe x seed) residual of the table of differences, the base a row of zeros:
    z_rs = d_rs (z_base,s = 0) = m_r + c_s + e_rs   (least squares over the cells present),
    sigma^2 = sum_rs e_rs^2 / df,   df = cells - (R + S - 1)   ((R - 1)(S - 1) for a full table),
    s = sqrt(2) sigma  (the sd of one seed's difference of two recipes),
    mean_v +- t(df, (1 + level) / 2) * s / sqrt(n_v),
where seed_verdicts sets the level to 1 - (1 - level) / (3 V) for a table of V variants (Bonferroni, see there).
Why pooled: with 2-3 seeds a variant's own sd has 1-2 degrees of freedom (t = 12.7 or 4.3 at 95%),
so its interval says almost nothing; the variants of one LOO sweep are one recipe changed on one
axis each, so one run-to-run sd for the sweep is a fair assumption with many more degrees of
freedom (8 variants x 2 seeds: df = 8). The per-variant sd is kept (`own_sd`) so a reader can see
when the assumption fails. Why the two-way residual and not the variants' own spreads pooled
(sum_v sum_s (d_vs - mean_v)^2 / sum_v (n_v - 1)): every d_vs carries the same base run, so those
spreads share the base's seed-to-seed error and are not the independent degrees of freedom the t
quantile assumes; simulated (null sweeps of 8 variants, normal noise, 200,000 tables), their 95%
intervals missed 7.7% (2 seeds) and 7.0% (3 seeds), the two-way residual's 5.0% and 5.0%. The two-way
model is the textbook one for this design (seeds are blocks: a seed's shared warm start and prompt
order move every recipe of that seed). Why not a hierarchical bootstrap: with 2-3 seeds resampling
seeds has 3-10 distinct draws, and its percentile intervals are too narrow for so few.
Minimum detectable effect (two-sided test at `level`, power `power`, against the smallest effect a
verdict is made on, `margin`: seed_verdicts' MIN_A_SHIFT and MIN_COMPUTE_RATIO): the true effect
called with probability `power`, solved on the noncentral t (detectable_effect); close to, and at small df
above, the textbook margin + (t(df, (1 + level) / 2) + t(df, power)) * s / sqrt(n_v).
A variant whose A sits at a bound is left out of A's pooled sd (a_pinned). With one seed per run there is
no run-to-run sd (df = 0): no interval and no verdict; the MDE is then a lower bound from the within-run
bootstrap alone (z quantiles), marked as such. A variant with one paired seed gets no verdict either.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fitting.validate import FitInputError

LEVEL = 0.95
POWER = 0.80
REACH_LEVELS = (0.5, 0.9)  # compute to reach 50% / 90% of the gain the base made by the end of the fit window
# The smallest effects a verdict is made on (seed_verdicts): an interval must clear them, not only 0.
# Compute: the CPU clock reproduces the same run within ~10% (BENCHMARKS.md, "The compute axis on a
# shared CPU"; a busy machine, a job's start, the CPU's make), so a ratio under x1.10 can come from
# the clock and the machine rather than the recipe. A: the 0.02 margin every prediction is held to.
MIN_COMPUTE_RATIO = 1.10
MIN_A_SHIFT = 0.02


@dataclass(frozen=True)
class PairedEffect:
    """mean over seeds of q(variant, s) - q(base, s), with its interval and MDE; NaN where undefined."""

    quantity: str
    estimate: float
    low: float  # NaN with one seed (no run-to-run variance)
    high: float
    n_seeds: int
    mde: float  # minimum detectable effect at LEVEL / POWER, margin included
    mde_is_lower_bound: bool  # True with one seed: within-run noise only
    own_sd: float  # this variant's own sd of the d_s (NaN below 2 seeds)
    per_seed: tuple[float, ...]
    margin: float = 0.0  # the smallest effect a verdict is made on: the interval must clear +-margin

    @property
    def significant(self) -> bool:
        """The interval clears +-margin: lies wholly above margin or below -margin (never with one seed)."""
        return bool(not (math.isnan(self.low) or math.isnan(self.high))
                    and (self.low > self.margin or self.high < -self.margin))

    @property
    def inside_margin(self) -> bool:
        """The interval excludes 0 but not the margin: an effect smaller than the table calls, or none."""
        return bool(not self.significant and not (math.isnan(self.low) or math.isnan(self.high))
                    and (self.low > 0 or self.high < 0))


def pooled_sd(differences: Mapping[str, list[float]]) -> tuple[float, int]:
    """(s, df): run-to-run sd pooled over groups, s^2 = sum_v sum_s (d_vs - mean_v)^2 / sum_v (n_v - 1).

    For values of independent runs (a recipe's seeds); the paired differences against one base use
    paired_difference_sd, whose terms do not all share the base.
    """
    squares, df = 0.0, 0
    for values in differences.values():
        values = np.asarray(values, dtype=float)
        if values.size >= 2:
            squares += float(((values - values.mean()) ** 2).sum())
            df += values.size - 1
    return (math.sqrt(squares / df) if df else math.nan), df


def paired_difference_sd(differences: Mapping[str, Mapping[int, float]]) -> tuple[float, int]:
    """(s, df): the run-to-run sd of one seed's paired difference, from the two-way residual (module docstring).

    differences[variant][seed] = q(variant, seed) - q(base, seed), finite; the base enters as a row of
    zeros at every seed any variant has. NaN and df 0 when no residual is left (one seed everywhere).
    """
    rows = {name: dict(by_seed) for name, by_seed in differences.items() if by_seed}
    seeds = sorted({seed for by_seed in rows.values() for seed in by_seed})
    if not rows or len(seeds) < 2:
        return math.nan, 0
    cells = [(0, seeds.index(seed), 0.0) for seed in seeds]  # the base: z = 0 at every seed
    for r, by_seed in enumerate(rows.values(), start=1):
        cells += [(r, seeds.index(seed), float(value)) for seed, value in by_seed.items()]
    design = np.zeros((len(cells), len(rows) + 1 + len(seeds) - 1))
    for i, (r, s, _) in enumerate(cells):
        design[i, r] = 1.0  # recipe mean m_r
        if s:
            design[i, len(rows) + s] = 1.0  # seed effect c_s (the first seed's is 0)
    z = np.array([value for _, _, value in cells])
    coefficients, _, rank, _ = np.linalg.lstsq(design, z, rcond=None)
    df = len(cells) - int(rank)
    if df < 1:
        return math.nan, 0
    sigma2 = float(((z - design @ coefficients) ** 2).sum()) / df
    return math.sqrt(2.0 * sigma2), df


def detectable_effect(sd: float, n: int, df: int, level: float = LEVEL, power: float = POWER,
                      margin: float = 0.0) -> float:
    """The minimum detectable effect: the true effect whose interval clears +-margin with probability `power`.

    The interval d +- t_l s_hat / sqrt(n), t_l = t(df, (1 + level) / 2), clears the margin on the effect's side
    when T = (d - margin) / (s_hat / sqrt(n)) > t_l, and T is noncentral t, nct(df, (delta - margin) sqrt(n) / sd)
    (d and s_hat are independent in the two-way model), so the MDE solves P(T > t_l) = power for delta. The
    textbook margin + (t_l + t(df, power)) sd / sqrt(n) treats s_hat as known: at the df of small LOO tables an
    effect of that size is called 70-79% of the time, not 80% (fitting.power, tests/fitting/test_power.py).
    """
    from scipy.optimize import brentq

    if not sd > 0:  # no run-to-run noise at all: any effect beyond the margin is called
        return float(margin)
    critical = float(stats.t.ppf((1 + level) / 2, df))

    def shortfall(effect: float) -> float:
        return float(stats.nct.sf(critical, df, (effect - margin) * math.sqrt(n) / sd)) - power

    high = margin + (critical + float(stats.t.ppf(power, df))) * sd / math.sqrt(n)
    while shortfall(high) < 0:
        high = margin + 2 * (high - margin)
    return float(brentq(shortfall, margin, high, xtol=1e-9 * sd))


def paired_effects(values: Mapping[str, Mapping[int, float]], base: str, quantity: str, *,
                   within_run_sd: Mapping[str, float] | None = None, level: float = LEVEL,
                   power: float = POWER, margin: float = 0.0,
                   left_out_of_sd: Collection[str] = ()) -> dict[str, PairedEffect]:
    """Paired effects of every variant against `base` for one quantity.

    values[variant][seed] = the quantity from that seed's fit; only seeds the base also has are
    paired. within_run_sd[variant] (optional): the within-run (bootstrap) sd of the quantity, used
    only for the one-seed MDE lower bound, margin + sqrt(sd_v^2 + sd_base^2) * (z_level + z_power).
    margin: the smallest effect that counts (PairedEffect.significant); MDE = detectable_effect: the
    effect called with probability `power`, the margin included.
    left_out_of_sd: variants whose differences do not enter the pooled sd (they still get its interval):
    a quantity pinned at a bound in a variant's runs (a_pinned) has no spread of its own there, and its
    differences, carrying the base's noise alone, would narrow every interval of the table.
    """
    if base not in values:
        raise FitInputError(f"base {base!r} has no per-seed values for {quantity}")
    if not 0 < level < 1 or not 0 < power < 1:
        raise FitInputError(f"level and power must be in (0, 1); got {level!r}, {power!r}")
    if not (math.isfinite(margin) and margin >= 0):
        raise FitInputError(f"margin must be a finite number >= 0; got {margin!r}")
    by_seed_differences = {}
    for name, by_seed in values.items():
        if name == base:
            continue
        seeds = sorted(set(by_seed) & set(values[base]))
        by_seed_differences[name] = {s: by_seed[s] - values[base][s] for s in seeds}
    differences = {name: list(d.values()) for name, d in by_seed_differences.items()}
    sd, df = paired_difference_sd({name: d for name, d in by_seed_differences.items()
                                   if d and all(np.isfinite(list(d.values()))) and name not in left_out_of_sd})
    effects = {}
    for name, d in differences.items():
        n = len(d)
        if n == 0:
            continue
        estimate = float(np.mean(d))
        own = float(np.std(d, ddof=1)) if n >= 2 and all(np.isfinite(d)) else math.nan
        if not all(np.isfinite(d)):
            # A level one curve never reaches (+-inf): certain only when every seed agrees on it.
            certain = all(x == d[0] for x in d) and math.isinf(d[0])
            low = high = d[0] if certain else math.nan
            effects[name] = PairedEffect(quantity=quantity, estimate=estimate, low=float(low), high=float(high),
                                         n_seeds=n, mde=math.nan, mde_is_lower_bound=False, own_sd=own,
                                         per_seed=tuple(float(x) for x in d), margin=margin)
            continue
        if df >= 1 and np.isfinite(sd):
            half = stats.t.ppf((1 + level) / 2, df) * sd / math.sqrt(n)
            low, high = estimate - half, estimate + half
            mde = detectable_effect(sd, n, df, level, power, margin)
            lower_bound = False
        else:
            low = high = math.nan
            noise = math.nan
            if within_run_sd is not None and name in within_run_sd and base in within_run_sd:
                noise = math.hypot(within_run_sd[name], within_run_sd[base])
            mde = margin + (stats.norm.ppf((1 + level) / 2) + stats.norm.ppf(power)) * noise
            lower_bound = True
        effects[name] = PairedEffect(quantity=quantity, estimate=estimate, low=float(low), high=float(high),
                                     n_seeds=n, mde=float(mde), mde_is_lower_bound=lower_bound, own_sd=own,
                                     per_seed=tuple(float(x) for x in d), margin=margin)
    return effects


def compute_to_reach(fit, level: float) -> float:
    """Compute at which a fitted sigmoid reaches pass rate `level`: C = C_mid ((A - R0)/(R - R0) - 1)^(-1/B).

    A fit that starts at or above the level reaches it at compute 0; one whose asymptote is at or
    below it never does (inf).
    """
    if level <= fit.r0:
        return 0.0
    if fit.a <= level:
        return math.inf
    ratio = (fit.a - fit.r0) / (level - fit.r0) - 1.0
    return float(fit.c_mid * ratio ** (-1.0 / fit.b))


def reach_levels(base_fit, fit_at: float, fractions=REACH_LEVELS) -> dict[float, float]:
    """Pass-rate levels R0 + f (R_base(fit_at) - R0): fractions of the gain the base made by fit_at.

    Read from the base's fitted curve inside its window, so they exist even when the base's ceiling
    A is not identifiable (a level tied to A would move with the unidentified A).
    """
    reached = float(base_fit.predict(fit_at))
    return {f: base_fit.r0 + f * (reached - base_fit.r0) for f in fractions}


def log_reach_ratio(fit, base_fit, level: float) -> float:
    """ln(C_variant(level) / C_base(level)): > 0 the variant needs more compute (slower), < 0 less.

    +inf when only the variant never reaches the level, -inf when only the base never does.
    """
    variant_c, base_c = compute_to_reach(fit, level), compute_to_reach(base_fit, level)
    if variant_c <= 0 or base_c <= 0:
        return math.nan  # a curve that starts above the level: no compute-to-reach to compare
    if math.isinf(variant_c) or math.isinf(base_c):
        return math.nan if variant_c == base_c else (math.inf if math.isinf(variant_c) else -math.inf)
    return math.log(variant_c / base_c)


def ceiling_identifiable(fit) -> bool:
    """A is read from the data: not at a bound, and the window reaches past C_mid (with its upper bound)."""
    return not ({"a_at_bound", "window_ends_before_c_mid", "not_increasing", "flat_curve"} & set(fit.flags))


def a_pinned(seed_fits: Mapping[str, Mapping[int, object]], base: str) -> set[str]:
    """Variants whose A sits at a bound in some seed's fit (flag a_at_bound). Such A's do not spread as a free
    ceiling would (the demo's length penalty reads 1.0 on every seed), so they are left out of the pooled sd
    of A (paired_effects): kept in, the demo's one pinned variant narrowed every A interval by ~5% (one seed's
    sd 0.0257 with df 16 against 0.0271 with df 14 without it). A variant whose seed-mean A interval merely
    reaches the bound keeps its seeds' A's, which still spread."""
    return {name for name, by_seed in seed_fits.items()
            if name != base and any("a_at_bound" in fit.flags for fit in by_seed.values())}


def unidentifiable_reason(by_seed: Mapping[int, object], base_fits: Mapping[int, object]) -> str | None:
    """Why A is not identifiable for a variant, in words: the per-seed flags that block it (ceiling_identifiable)
    other than a window ending before C_mid, named with the seeds they hold in ("A at its bound in seeds 0, 1");
    None when only the window blocks it (the caller then names the budget a ceiling claim needs)."""
    words = {"a_at_bound": "A at its bound", "not_increasing": "a curve that does not rise",
             "flat_curve": "a flat curve"}
    parts = []
    for whose, fits in (("", by_seed), ("the base's ", base_fits)):
        for flag, text in words.items():
            seeds = sorted(seed for seed, fit in fits.items() if flag in fit.flags)
            if seeds:
                parts.append(f"{text} in {whose}seed{'s' if len(seeds) > 1 else ''} "
                             f"{', '.join(str(seed) for seed in seeds)}")
    return "; ".join(parts) or None


def budget_for_ceiling(fit) -> float:
    """The fit_at a ceiling claim needs: 3 x C_mid's approximate 95% upper bound (the paper fits to ~3x C_mid)."""
    return 3.0 * max(fit.c_mid, fit.c_mid_upper)


def held_out_interval(predictions: list[float], observed_sd: float, prediction_sd: float, df: int,
                      level: float = LEVEL, shape_sd: float = 0.0) -> tuple[float, float]:
    """Interval for a new seed's observed value at the target, from the other seeds' predictions.

    centre = mean of the other seeds' predictions (m of them); a new seed's observed value differs
    from it by its own run-to-run noise (observed_sd), the noise of the mean of m predictions
    (prediction_sd / sqrt(m)) and the fits' shape error (shape_sd: fitting.ShapeCheck.rms_residual,
    how far the fits miss their own window's end, a lower bound on their miss at the target):
    centre +- t(df) sqrt(observed_sd^2 + prediction_sd^2 / m + shape_sd^2).
    """
    m = len(predictions)
    if m < 1 or df < 1:
        return (math.nan, math.nan)
    centre = float(np.mean(predictions))
    half = stats.t.ppf((1 + level) / 2, df) * math.sqrt(observed_sd ** 2 + prediction_sd ** 2 / m + shape_sd ** 2)
    return centre - half, centre + half


BASE_VERDICT, CEILING_MOVER, EFFICIENCY_SHAPER = "base", "ceiling mover", "efficiency shaper"
NO_EFFECT, NO_VERDICT = "no detectable effect", "no verdict"


@dataclass(frozen=True)
class SeedVerdict:
    """A variant's verdict from its paired seeds, the effects it rests on and why, in one line."""

    verdict: str  # base, ceiling mover, efficiency shaper, no detectable effect, no verdict
    direction: str | None  # ceiling mover: "higher" / "lower" A; efficiency shaper: "faster" / "slower" / "mixed"
    reason: str
    effects: dict[str, PairedEffect]  # "A", "pred_at_target", "reach_50", "reach_90" (ln compute ratios)
    ceiling_identifiable: bool  # A identifiable in every seed of the variant and of the base
    ceiling_budget: float  # the fit_at a ceiling claim would need (3 x the largest C_mid upper bound)


def table_level(variants: int, level: float = LEVEL) -> tuple[int, float]:
    """(tests, per-interval level) of a LOO table of `variants` variants: Bonferroni over its tests,
    tests = (1 + len(REACH_LEVELS)) x variants (A and each reach level), level_i = 1 - (1 - level) / tests."""
    tests = (1 + len(REACH_LEVELS)) * max(1, variants)
    return tests, 1 - (1 - level) / tests


def _reach_key(fraction: float) -> str:
    return f"reach_{round(fraction * 100)}"


def seed_quantities(seed_fits: Mapping[str, Mapping[int, object]], base: str, *, fit_at: float,
                    target: float) -> dict[str, dict[str, dict[int, float]]]:
    """values[quantity][variant][seed] of every quantity a verdict tests or reports (seed_verdicts):
    "A", "pred_at_target" (R(target)), and "reach_50" / "reach_90": ln(C_v / C_base) to reach that share of
    the gain the base's fit of the same seed made by fit_at (the base itself: 0 at every seed)."""
    base_fits = seed_fits[base]
    values: dict[str, dict[str, dict[int, float]]] = {q: {} for q in ("A", "pred_at_target")}
    for fraction in REACH_LEVELS:
        values[_reach_key(fraction)] = {base: dict.fromkeys(base_fits, 0.0)}  # the base against itself
    levels = {seed: reach_levels(fit, fit_at) for seed, fit in base_fits.items()}
    for name, by_seed in seed_fits.items():
        values["A"][name] = {s: f.a for s, f in by_seed.items()}
        values["pred_at_target"][name] = {s: float(f.predict(target)) for s, f in by_seed.items()}
        if name == base:
            continue
        for fraction in REACH_LEVELS:
            values[_reach_key(fraction)][name] = {
                seed: log_reach_ratio(fit, base_fits[seed], levels[seed][fraction])
                for seed, fit in by_seed.items() if seed in base_fits}
    return values


def seed_verdicts(seed_fits: Mapping[str, Mapping[int, object]], base: str, *, fit_at: float, target: float,
                  within_run_sd: Mapping[str, Mapping[str, float]] | None = None, level: float = LEVEL,
                  power: float = POWER, a_interval_at_bound: Collection[str] = (),
                  min_compute_ratio: float = MIN_COMPUTE_RATIO, min_a_shift: float = MIN_A_SHIFT,
                  ) -> dict[str, SeedVerdict]:
    """Verdict of every variant against the base from per-seed fits (seed_fits[variant][seed] = FitResult).

    Effects (paired over seeds, pooled run-to-run sd, see the module docstring):
      A               A_v - A_base of the free fits;
      pred_at_target  R_v(target) - R_base(target) of the fits;
      reach_50/90     ln(C_v / C_base), the compute each fitted curve needs to reach 50% / 90% of the
                      gain the base made by fit_at (> 0: the variant needs more compute: slower).
    Every interval is at level 1 - (1 - level) / (3 V) for V variants (Bonferroni over the table's
    3 V tested effects: A and the two reach levels of each variant), so a sweep whose variants have no
    effect shows any verdict with probability <= 1 - level. Why the whole table: at 1 - level per
    variant, a table of 8 null variants would carry a spurious verdict ~34% of the time (1 - 0.95^8),
    and the same spec run twice would disagree somewhere about as often (measured: BENCHMARKS.md,
    "Verdicts that replicate"). The MDE is at the same level: what the table can detect.
    Smallest effects (margins): an interval must clear +-min_a_shift in A, and in compute lie beyond
    x min_compute_ratio (or below its inverse), not only exclude 0. Why: a verdict is a claim about the
    recipe, and a compute ratio within the clock's own ~10% reproducibility (MIN_COMPUTE_RATIO) can be
    the clock's or the machine's: the same two-seed demo on another CPU read two variants "faster" at
    x0.92 [x0.85, x0.99] and x0.89 [x0.82, x0.96] to 90% of the gain, where nine of ten demos on the
    first CPU had read both as null (BENCHMARKS.md, "Verdicts beyond the clock's tolerance"). An
    effect that clears 0 but not its margin is reported in the reason, with no verdict.
    min_compute_ratio = 1 and min_a_shift = 0 give the plain tests.
    Verdict, in this order:
      no verdict            fewer than 2 paired seeds, or no run-to-run variance in the sweep (df = 0);
      ceiling mover         the A interval clears +-min_a_shift and A is identifiable in every seed of both runs
                            (not at a bound, window past C_mid) and in the seed-mean fit of both (its
                            bootstrap A interval does not reach a bound: names in a_interval_at_bound);
                            an unidentifiable A makes no claim;
      efficiency shaper     a reach interval lies beyond x min_compute_ratio: "faster" (less compute) or
                            "slower"; both levels significant in opposite directions: "mixed". A variant below the base
                            everywhere in the window needs more compute to every level: never "faster";
      no detectable effect  otherwise, with the MDE of A and of the pass rate at the target.
    within_run_sd[variant]["A" / "pred_at_target"]: bootstrap sd of a one-seed fit, for the one-seed MDE.
    a_interval_at_bound: runs whose seed-mean fit has a bootstrap A interval reaching A's bound. Why:
    a seed's A of 0.988 under the bound 1 is "not at a bound", yet when the curve's own draws reach 1
    the window cannot place the ceiling; the embedded demo then read length_penalty "ceiling mover"
    in two runs and "faster" in a third, as its A landed just under or on the bound.
    """
    if base not in seed_fits or not seed_fits[base]:
        raise FitInputError(f"base {base!r} has no fitted seeds")
    if not (math.isfinite(min_compute_ratio) and min_compute_ratio >= 1):
        raise FitInputError(f"min_compute_ratio must be >= 1 (1: no margin); got {min_compute_ratio!r}")
    if not (math.isfinite(min_a_shift) and min_a_shift >= 0):
        raise FitInputError(f"min_a_shift must be >= 0 (0: no margin); got {min_a_shift!r}")
    margins = {"A": min_a_shift, "pred_at_target": 0.0}  # pred_at_target is reported, not tested
    margins.update({_reach_key(f): math.log(min_compute_ratio) for f in REACH_LEVELS})
    base_fits = seed_fits[base]
    values = seed_quantities(seed_fits, base, fit_at=fit_at, target=target)
    effects: dict[str, dict[str, PairedEffect]] = {}
    # Each variant tests A and the reach levels (pred_at_target is reported, not tested); the table
    # makes those claims for every variant at once: Bonferroni over all of them keeps the chance of any
    # spurious verdict in the table at 1 - level.
    _, level = table_level(sum(1 for name in seed_fits if name != base), level)
    for quantity, by_variant in values.items():
        sd = None
        if within_run_sd is not None and quantity in ("A", "pred_at_target"):
            sd = {name: noise[quantity] for name, noise in within_run_sd.items() if quantity in noise}
        if base in by_variant:
            left_out = a_pinned(seed_fits, base) if quantity == "A" else ()
            for name, effect in paired_effects(by_variant, base, quantity, within_run_sd=sd, level=level,
                                               power=power, margin=margins[quantity], left_out_of_sd=left_out).items():
                effects.setdefault(name, {})[quantity] = effect
    unpinned = set(a_interval_at_bound)
    base_identifiable = base not in unpinned and all(ceiling_identifiable(f) for f in base_fits.values())
    verdicts = {base: SeedVerdict(BASE_VERDICT, None, "the reference", {}, base_identifiable,
                                  max(budget_for_ceiling(f) for f in base_fits.values()))}
    for name, by_seed in seed_fits.items():
        if name == base:
            continue
        found = effects.get(name, {})
        identifiable = (base_identifiable and name not in unpinned
                        and all(ceiling_identifiable(f) for f in by_seed.values()))
        budget = max(budget_for_ceiling(f) for f in [*by_seed.values(), *base_fits.values()])
        if name in unpinned:
            why_not = "its A interval reaches a bound"
        elif base in unpinned:
            why_not = "the base's A interval reaches a bound"
        else:
            why_not = unidentifiable_reason(by_seed, base_fits)
        verdicts[name] = _verdict(found, identifiable, budget, why_not)
    return verdicts


def _fmt_mde(effect: PairedEffect | None) -> str:
    if effect is None or not np.isfinite(effect.mde):
        return "?"
    return ("≥" if effect.mde_is_lower_bound else "") + f"{effect.mde:.3f}"


def ratio_text(log_ratio: float) -> str:
    """A compute ratio from its log: 'x1.42', 'never reached' (+inf), 'x0' (-inf)."""
    if math.isinf(log_ratio):
        return "never reached" if log_ratio > 0 else "x0"
    return f"x{math.exp(log_ratio):.2f}"


def _verdict(effects: dict[str, PairedEffect], identifiable: bool, budget: float,
             why_not_identifiable: str | None = None) -> SeedVerdict:
    a, pred = effects.get("A"), effects.get("pred_at_target")
    mde = f"MDE: A {_fmt_mde(a)}, pass rate at target {_fmt_mde(pred)}"
    reach = [effects.get(_reach_key(f)) for f in REACH_LEVELS]
    if any(r is not None and np.isfinite(r.mde) for r in reach):
        mde += ", compute " + " / ".join("?" if r is None or not np.isfinite(r.mde) else ratio_text(r.mde)
                                         for r in reach)
    n = a.n_seeds if a is not None else 0
    if a is None or n < 2 or not np.isfinite(a.low):
        # One paired seed gets an interval from the other variants' pooled sd, but a verdict on one run of
        # the variant is a claim about that run, not the recipe: none is made.
        why = (f"{n} paired seed{'s' if n != 1 else ''}"
               + ("; a verdict needs >= 2 (a seed whose fit failed pairs with nothing)" if n < 2
                  else "; no run-to-run variance"))
        return SeedVerdict(NO_VERDICT, None, f"{why} ({mde})", effects, identifiable, budget)
    notes = ""  # what the verdict does not say: an unidentifiable A, effects under their margin
    if a.significant:
        direction = "higher" if a.estimate > 0 else "lower"
        if identifiable:
            return SeedVerdict(CEILING_MOVER, direction,
                               f"A {a.estimate:+.3f} [{a.low:+.3f}, {a.high:+.3f}] over {n} seeds", effects,
                               identifiable, budget)
        why = why_not_identifiable or f"needs a fit reaching >= {budget:.3g}"
        notes = f"; A looks {direction} but is not identifiable ({why})"
    reach_effects = [effects[k] for k in (_reach_key(f) for f in REACH_LEVELS) if k in effects]
    small = [f"compute to {e.quantity.removeprefix('reach_')}% {ratio_text(e.estimate)} "
             f"[{ratio_text(e.low)}, {ratio_text(e.high)}]" for e in reach_effects if e.inside_margin]
    if a.inside_margin:
        small.insert(0, f"A {a.estimate:+.3f} [{a.low:+.3f}, {a.high:+.3f}]")
    if small:  # clears 0 but not its margin: shown, not called
        called = [f"A {a.margin:g}"] + ([f"compute {ratio_text(reach_effects[0].margin)}"] if reach_effects else [])
        notes += "; " + ", ".join(small) + f": under the smallest effect called ({', '.join(called)})"
    reach = [e for e in reach_effects if e.significant]
    if reach:
        signs = {effect.estimate > 0 for effect in reach}
        direction = "mixed" if len(signs) == 2 else ("slower" if signs == {True} else "faster")
        parts = [f"compute to {e.quantity.removeprefix('reach_')}% of the base's gain {ratio_text(e.estimate)} "
                 f"[{ratio_text(e.low)}, {ratio_text(e.high)}]" for e in reach]
        return SeedVerdict(EFFICIENCY_SHAPER, direction, "; ".join(parts) + notes, effects, identifiable,
                           budget)
    return SeedVerdict(NO_EFFECT, None, mde + notes, effects, identifiable, budget)
