"""A verdict in words: its why (the figure it was called on, then the figures short of their margin) and its sentence.

    why = verdict_why(c.verdict, c.direction, c.effects, ceiling_budget=c.ceiling_budget, fallback=c.reason)
    # 'called on compute to 50% of the base's gain x1.64 [x1.16, x2.33] (beyond x1.10);
    #  not called: compute to 90% x1.28 [x1.07, x1.53], its lower end short of the x1.10 margin'
    verdict_sentence(row)  # the title page's line: 'Slower: x1.64 [x1.16, x2.33] the base's compute to ...'

fitting.seeds makes the call (which interval clears its margin); this module only words it, so that
the why reads as the verdict does: the figure the verdict rests on comes first, after "called on",
and a figure whose interval clears 0 but not its margin comes after "not called:", named as such.
"""

from __future__ import annotations

import math

import pandas as pd

from fitting.seeds import CEILING_MOVER, EFFICIENCY_SHAPER, NO_EFFECT, NO_VERDICT, REACH_LEVELS, ratio_text

CALLED, NOT_CALLED = "called on ", "not called: "
REACH_KEYS = tuple(f"reach_{round(f * 100)}" for f in REACH_LEVELS)


def _level(effect) -> str:
    return effect.quantity.removeprefix("reach_")


def effect_text(effect, *, full: bool = False) -> str:
    """'dA +0.050 [+0.021, +0.079]' or 'compute to 90% x1.28 [x1.07, x1.53]' (full: '... of the base's gain ...')."""
    if effect.quantity == "A":
        return f"dA {effect.estimate:+.3f} [{effect.low:+.3f}, {effect.high:+.3f}]"
    gain = " of the base's gain" if full else ""
    return (f"compute to {_level(effect)}%{gain} {ratio_text(effect.estimate)} "
            f"[{ratio_text(effect.low)}, {ratio_text(effect.high)}]")


def margin_text(effect, side: float) -> str:
    """The margin an interval must clear on the side of `side`: '+0.02' / '-0.02' in A, 'x1.10' / 'x0.91' in compute."""
    if effect.quantity == "A":
        return f"{math.copysign(effect.margin, side):+g}"
    return ratio_text(math.copysign(effect.margin, side))


def _short_of_margin(effect) -> str:
    """'compute to 90% x1.28 [x1.07, x1.53], its lower end short of the x1.10 margin' (clears 0, not the margin)."""
    end = "lower" if effect.estimate > 0 else "upper"
    return f"{effect_text(effect)}, its {end} end short of the {margin_text(effect, effect.estimate)} margin"


def _mde(effect) -> str:
    if effect is None or not math.isfinite(effect.mde):
        return "?"
    return ("≥" if effect.mde_is_lower_bound else "") + f"{effect.mde:.3f}"


def verdict_why(verdict: str, direction: str | None, effects: dict, *, ceiling_budget: float = math.nan,
                a_pinned: str | None = None, fallback: str = "", budget_key: str = "fit_at") -> str:
    """Why a verdict, in one line: "called on <figure>" first, then "not called: <figure>, its ... short of ...".

    effects: fitting.seeds.PairedEffect by quantity ("A", "pred_at_target", "reach_50", "reach_90"), as
    fitting.seeds.seed_verdicts left them (each with its margin). The verdict is taken as given; the why
    names the figure(s) it rests on, the margin they clear, and every other figure that clears 0 but
    not its margin, or clears it but cannot be called (an A that is not identifiable: `a_pinned` says
    why, else the `budget_key` (fit_at; target with budget.verdicts_from: run) a ceiling claim needs). base, no
    verdict and a verdict without effects keep
    `fallback` (fitting's reason: "the reference", "1 seed; run >= 2 seeds (MDE ...)").
    """
    a = effects.get("A")
    if verdict not in (CEILING_MOVER, EFFICIENCY_SHAPER, NO_EFFECT) or a is None:
        return fallback
    reach = [effects[k] for k in REACH_KEYS if k in effects]
    if verdict == CEILING_MOVER:
        called = [a]
    elif verdict == EFFICIENCY_SHAPER:
        called = [e for e in reach if e.significant]
    else:
        called = []
    short = []
    if verdict != CEILING_MOVER:  # a ceiling mover is called on A alone; its compute figures are in the table
        if a.significant:
            why = a_pinned or f"a ceiling claim needs {budget_key} >= {ceiling_budget:.3g}"
            short.append(f"{effect_text(a)}, beyond the {margin_text(a, a.estimate)} margin but A is not "
                         f"identifiable ({why})")
        elif a.inside_margin:
            short.append(_short_of_margin(a))
        short += [_short_of_margin(e) for e in reach if e not in called and e.inside_margin]
    if called:
        head = CALLED + " and ".join(
            f"{effect_text(e, full=e.quantity != 'A')} (clear of {margin_text(e, e.estimate)})" for e in called)
        if verdict == CEILING_MOVER:
            head += f" over {a.n_seeds} seeds"
    else:
        compute = next((ratio_text(e.margin) for e in reach), None)
        margins = f"A ±{a.margin:g}" + (f", compute {compute}" if compute else "")
        head = (f"nothing called (margins: {margins}); "
                f"MDE: A {_mde(a)}, pass rate at target {_mde(effects.get('pred_at_target'))}")
    return head + ("; " + NOT_CALLED + "; ".join(short) if short else "")


# --- the title page's sentence per variant ---------------------------------------------------------------

def _interval(row, prefix: str, spec: str) -> str:
    low, high = row.get(f"{prefix}_lo", math.nan), row.get(f"{prefix}_hi", math.nan)
    return "" if pd.isna(low) or pd.isna(high) else f" [{format(low, spec)}, {format(high, spec)}]"


def _ratio(row, prefix: str) -> str:
    low, high = row.get(f"{prefix}_lo", math.nan), row.get(f"{prefix}_hi", math.nan)
    interval = "" if pd.isna(low) or pd.isna(high) else f" [{ratio_text(low)}, {ratio_text(high)}]"
    return ratio_text(row[prefix]) + interval


def _called_reach(row, min_compute_ratio: float) -> list[str]:
    """The reach levels ('50', '90') whose interval in the LOO row lies beyond x min_compute_ratio (or its inverse)."""
    margin = math.log(min_compute_ratio)
    levels = []
    for key in REACH_KEYS:
        low, high = row.get(f"log_{key}_lo", math.nan), row.get(f"log_{key}_hi", math.nan)
        if pd.notna(low) and pd.notna(high) and (low > margin or high < -margin):
            levels.append(key.removeprefix("reach_"))
    return levels


def verdict_sentence(row, *, target: str = "the target", min_compute_ratio: float = 1.10) -> str:
    """One sentence on a LOO table row's verdict with its key figure, for the title page.

    'Lowers the ceiling: A -0.100 [-0.119, -0.081] against the base.'
    'Slower: x1.64 [x1.16, x2.33] the base's compute to reach 50% of its gain.'
    'No detectable effect: a shift of 0.076 in A or 0.050 in pass rate at 240 s would have shown 80% of the time.'
    """
    verdict, direction = row["verdict"], row.get("direction") or ""
    if verdict == CEILING_MOVER:
        verb = "Raises" if direction == "higher" else "Lowers"
        return f"{verb} the ceiling: A {row['d_A']:+.3f}{_interval(row, 'd_A', '+.3f')} against the base."
    if verdict == EFFICIENCY_SHAPER:
        levels = _called_reach(row, min_compute_ratio)
        parts = [f"{_ratio(row, f'log_reach_{level}')} the base's compute to reach {level}% of its gain" if not i
                 else f"{_ratio(row, f'log_reach_{level}')} to reach {level}%" for i, level in enumerate(levels)]
        return f"{direction.capitalize()}: {', '.join(parts)}."
    if verdict == NO_EFFECT:
        reach = [math.exp(row[key]) for key in ("MDE_reach_50", "MDE_reach_90")
                 if pd.notna(row.get(key, math.nan))]
        compute = f", or x{max(reach):.2f} in the compute to reach 50% or 90% of the gain," if reach else ""
        return (f"No detectable effect: a shift of {row['MDE_A']:.3f} in A or {row['MDE_pred']:.3f} in pass rate "
                f"at {target}{compute} would have shown 80% of the time.")
    if verdict == NO_VERDICT:  # the reason says why: too few paired seeds, or no run-to-run variance
        reason = str(row.get("reason") or "").split(" (MDE")[0] or "too few paired seeds"
        return f"No verdict: {reason}; the estimates are in the table."
    if verdict == "not fitted":
        return "Not fitted: see the notes page."
    return str(row.get("reason") or verdict)
