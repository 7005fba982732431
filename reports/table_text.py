"""The LOO table as text: its cells, the evidence block, the notes, and the aligned plain-text table.

The numbers come from reports.tables (fit_sweep); this module only words and formats them, for the
terminal (format_loo_table), the PDF's tables (reports.pdf) and the MLflow runs (reports.mlflow_sync).
"""

from __future__ import annotations

import math
import textwrap

import pandas as pd

from reports import schema
from reports.text import aligned_lines, sig3

SWEEP_NOTES = ("noise_note", "shape_note", "miss_note", "forecast_note", "protocol_note")

TRUNCATION_NOTE = (f"share of training steps whose truncation rate (samples interrupted or cut at the length "
                   f"limit) was below {schema.LOW_TRUNCATION_RATE:.0%}; the paper reports that for > "
                   f"{schema.LOW_TRUNCATION_STEPS_PAPER:.0%} of ScaleRL's steps; (!) marks less.")

def fmt(value, spec: str) -> str:
    return "-" if value is None or pd.isna(value) else format(value, spec)


def verdict_words(verdict: str, direction: str | None, split: str = " ") -> str:
    """'ceiling mover (higher A)', 'efficiency shaper (slower)', 'no detectable effect', 'no verdict'."""
    if not direction:
        return verdict
    return f"{verdict}{split}({direction}{' A' if verdict == 'ceiling mover' else ''})"


def verdict_text(row, split: str = " ") -> str:
    return verdict_words(row["verdict"], row["direction"], split)


def margin_mark(value) -> str:
    return "-" if value is None or pd.isna(value) else ("yes" if value else "NO")


def prediction_level(table: pd.DataFrame) -> str:
    """The prediction columns' interval as the header names it: "90% back-test" (reports.forecasts)."""
    kinds = [k for k in table.get("pred_interval", pd.Series(dtype=str)).dropna().unique() if k]
    return kinds[0].replace("back-test ", "") + " back-test" if len(kinds) == 1 else "interval"


def table_cells(table: pd.DataFrame, *, stacked: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of the LOO table: A to 3 decimals, B to 2, C_mid to 3 significant figures.

    stacked=True puts intervals and verdict directions on a second line of their cell (the PDF table).
    """
    target = table.attrs.get("target")
    at = f"@{target:g}" if target else "@target"
    fixed_a = table.attrs.get("fixed_a", math.nan)
    seeds = bool(table["A_seed_sd"].notna().any())
    truncation = "low_truncation_steps" in table.columns and bool(table["low_truncation_steps"].notna().any())
    split = "\n" if stacked else " "
    header = ["variant", "change (base -> alternative)", "A [95% CI]"] + (["A seed sd"] if seeds else []) + [
        "B", f"B at{split}A={fmt(fixed_a, '.3f')}", "C_mid", f"pred{at}{split}[{prediction_level(table)}]",
        f"obs{at}", "error", "ok"] + (
        [f"steps{split}trunc<5%"] if truncation else []) + ["verdict"]

    def with_ci(value, low, high):
        return f"{fmt(value, '.3f')}{split}[{fmt(low, '.3f')}, {fmt(high, '.3f')}]" if pd.notna(value) else "-"

    rows = []
    for _, r in table.iterrows():
        change = r["changed"] or "-"
        if stacked and change.startswith((f"{r['axis']}: ", f"{r['axis']}.")):
            change = change[len(r["axis"]) + 1:].lstrip()  # the variant cell already names the axis
        rows.append([r["variant"], change, with_ci(r["A"], r["A_lo"], r["A_hi"])]
                    + ([fmt(r["A_seed_sd"], ".3f")] if seeds else [])
                    + [fmt(r["B"], ".2f"), fmt(r["B_fixed_A"], ".2f"), sig3(r["C_mid"]),
                       with_ci(r["pred_at_target"], r["pred_lo"], r["pred_hi"]), fmt(r["observed_at_target"], ".3f"),
                       fmt(r["error"], "+.3f"), margin_mark(r["within_margin"])]
                    + ([low_truncation_text(r["low_truncation_steps"])] if truncation else [])
                    + [verdict_text(r, split)])
    return header, rows


def _mde_text(value, lower_bound) -> str:
    if value is None or pd.isna(value):
        return "-"
    return (">=" if lower_bound is True else "") + f"{value:.3f}"


def reach_mde_text(row) -> str:
    """The compute-to-reach MDEs as ratios, "x1.25 / x1.31" (50% / 90%): a variant needing that much more
    compute than the base (or 1/that less) is detected 80% of the time."""
    values = [row.get(f"MDE_reach_{level}", math.nan) for level in (50, 90)]
    if all(v is None or pd.isna(v) for v in values):
        return "-"
    return " / ".join("-" if v is None or pd.isna(v) else f"x{math.exp(v):.2f}" for v in values)


def evidence_cells(table: pd.DataFrame, *, stacked: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the seed-evidence table: paired effects vs the base with intervals, MDEs, reasons.

    Reach columns: the compute the variant needs to reach 50% / 90% of the gain the base made by
    fit_at (the target with budget.verdicts_from: run), as a multiple of the base's (x1.30 = 30% more
    compute: slower).
    """
    from fitting.seeds import ratio_text

    target = table.attrs.get("target")
    at = f"@{target:g}" if target else "@target"
    split = "\n" if stacked else " "
    header = ["variant", "seeds", f"dA{split}[interval]", "MDE A", f"d pred{at}{split}[interval]", "MDE pred",
              f"compute to 50%{split}[interval]", f"compute to 90%{split}[interval]", f"MDE compute{split}50% / 90%",
              "verdict", "why"]

    def effect(r, prefix, digits=".3f"):
        if pd.isna(r.get(prefix, math.nan)):
            return "-"
        low, high = r[f"{prefix}_lo"], r[f"{prefix}_hi"]
        interval = "" if pd.isna(low) else f"{split}[{format(low, '+' + digits)}, {format(high, '+' + digits)}]"
        return format(r[prefix], "+" + digits) + interval

    def reach(r, prefix):
        if pd.isna(r.get(prefix, math.nan)):
            return "-"
        low = r[f"{prefix}_lo"]
        interval = "" if pd.isna(low) else f"{split}[{ratio_text(low)}, {ratio_text(r[f'{prefix}_hi'])}]"
        return ratio_text(r[prefix]) + interval

    rows = []
    for _, r in table.iterrows():
        if r["variant"] == schema.BASE:
            continue
        rows.append([r["variant"], str(r["n_seeds"]), effect(r, "d_A"), _mde_text(r["MDE_A"], r["MDE_is_lower_bound"]),
                     effect(r, "d_pred"), _mde_text(r["MDE_pred"], r["MDE_is_lower_bound"]),
                     reach(r, "log_reach_50"), reach(r, "log_reach_90"), reach_mde_text(r), verdict_text(r, split),
                     r["reason"] or "-"])
    return header, rows


def evidence_note(table: pd.DataFrame) -> str:
    """How to read the evidence block: paired t-intervals at the table-wide level (fitting.seeds.table_level), MDE."""
    from fitting.seeds import LEVEL, MIN_A_SHIFT, MIN_COMPUTE_RATIO, table_level

    # The count the intervals used (variants with a fitted seed), else one from the table's rows.
    tests = table.attrs.get("tested_effects") or table_level(int((table["variant"] != schema.BASE).sum()))[0]
    level = 1 - (1 - LEVEL) / tests
    ratio, shift = table.attrs.get("min_compute_ratio", MIN_COMPUTE_RATIO), table.attrs.get("min_a_shift", MIN_A_SHIFT)
    whole_run = table.attrs.get("verdicts_from") == "run"
    by = "the target" if whole_run else "fit_at"
    return (
        "Evidence: each seed pairs a variant's run with the base's run of the same seed (same warm start, prompt "
        "order and sampling seed); an effect is the mean over seeds of variant - base, read from each seed's own fit. "
        "Intervals are paired t-intervals with one run-to-run sd for the sweep (the two-way recipe x seed residual), "
        f"at {level:.2%} "
        f"each (Bonferroni over the table's {tests} tested effects: dA and the two compute-to-reach ratios of each "
        "of its variants), so a table whose variants have no effect shows any verdict about 5% of the time. "
        f"A verdict needs more than an interval clear of 0: clear of +-{shift:g} in A and beyond x{ratio:.2f} in "
        "compute (budget.min_a_shift, budget.min_compute_ratio; by default the prediction margin and the CPU clock's "
        "~10% reproducibility, within which a ratio can be the clock's); a smaller effect that clears 0 is named in "
        "the reason, with no verdict. "
        "MDE: the smallest true difference the sweep detects 80% of the time at that "
        "level, the margin included; >= marks a lower bound from one seed's within-run noise (no run-to-run variance "
        "measured). "
        + ("Effects are read from each run's fit on the whole run, to the target (budget.verdicts_from: run); d pred "
           "is then the difference in the fitted pass rate at the target. " if whole_run else "")
        + "Verdicts: "
        "ceiling mover = the dA interval clears the margin and every seed's A is identifiable (not at a bound, window "
        "past C_mid; nor may the variant's or the base's seed-mean A interval reach its bound); efficiency shaper = "
        f"the compute to reach 50% or 90% of the base's gain by {by} differs beyond the margin (faster: less compute; "
        "slower: more; mixed: one each); no detectable effect = neither, at the MDE shown; no verdict = fewer than 2 "
        "paired seeds.")


def low_truncation_text(share) -> str:
    """'97%', or '72% (!)' below the paper's > 90% of steps with truncation < 5%; '-' when not logged."""
    if share is None or pd.isna(share):
        return "-"
    return f"{share:.0%}" + (" (!)" if share < schema.LOW_TRUNCATION_STEPS_PAPER else "")


def format_loo_table(table: pd.DataFrame) -> str:
    """The LOO table as aligned plain text, with its caption and the meaning of every flag that occurs."""
    from fitting import FLAG_MEANINGS

    lines = aligned_lines(*table_cells(table))
    if table.attrs.get("caption"):
        lines.insert(0, table.attrs["caption"])
    if "low_truncation_steps" in table.columns and table["low_truncation_steps"].notna().any():
        lines.append(f"\nsteps trunc<5%: {TRUNCATION_NOTE}")
    if "reason" in table.columns and (table["variant"] != schema.BASE).any():
        lines += ["", *aligned_lines(*evidence_cells(table)), textwrap.fill(evidence_note(table), 160)]
    for note in SWEEP_NOTES:
        if table.attrs.get(note):
            lines.append("\n" + textwrap.fill(table.attrs[note], 160))
    flagged = [(name, text) for name, text in table[["variant", "flags"]].itertuples(index=False) if text]
    if flagged:
        lines.append("\nflags (reasons not to trust a fit):")
        lines += [f"  {name}: {text}" for name, text in flagged]
        for flag in dict.fromkeys(f for _, text in flagged for f in text.split(", ") if f in FLAG_MEANINGS):
            lines.append(f"    {flag}: {FLAG_MEANINGS[flag]}")
    lines += regime_lines(table)
    return "\n".join(lines)


def regime_lines(table: pd.DataFrame) -> list[str]:
    """The rows whose prediction is not yet in a sigmoid's predictable regime, with what each reason means."""
    from fitting.forecast import REGIME_MEANINGS

    if "regime" not in table.columns:
        return []
    flagged = [(name, text) for name, text in table[["variant", "regime"]].itertuples(index=False) if text]
    if not flagged:
        return []
    lines = ["\nnot yet predictable (the prediction at the target, not the verdicts):"]
    lines += [f"  {name}: {text}" for name, text in flagged]
    for reason in dict.fromkeys(r for _, text in flagged for r in text.split(", ")):
        lines.append(f"    {reason}: {REGIME_MEANINGS[reason]}")
    return lines
