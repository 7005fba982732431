"""A verdict's why reads as the verdict does: the figure it was called on first, then what fell short of its margin."""

import math

import pytest

from fitting.seeds import (CEILING_MOVER, EFFICIENCY_SHAPER, MIN_A_SHIFT, MIN_COMPUTE_RATIO, NO_EFFECT, NO_VERDICT,
                           PairedEffect, _verdict)
from reports import schema
from reports.verdicts import CALLED, NOT_CALLED, effect_text, verdict_sentence, verdict_why

SHORT_WORDS = ("short of", "under", "inside", "not identifiable", "not called")


def effect(quantity: str, estimate: float, low: float, high: float, n_seeds: int = 2) -> PairedEffect:
    """A paired effect as fitting.seeds leaves it: compute ratios as their logs, each with its margin."""
    if quantity.startswith("reach_"):
        estimate, low, high = math.log(estimate), math.log(low), math.log(high)
        margin = math.log(MIN_COMPUTE_RATIO)
    else:
        margin = MIN_A_SHIFT if quantity == "A" else 0.0
    if n_seeds < 2:
        low = high = math.nan
    return PairedEffect(quantity, estimate, low, high, n_seeds, mde=0.1, mde_is_lower_bound=n_seeds < 2,
                        own_sd=math.nan, per_seed=(estimate,) * n_seeds, margin=margin)


def effects(a=(0.0, -0.03, 0.03), reach_50=(1.0, 0.9, 1.1), reach_90=(1.0, 0.9, 1.1), n_seeds=2) -> dict:
    return {"A": effect("A", *a, n_seeds), "pred_at_target": effect("pred_at_target", 0.0, -0.02, 0.02, n_seeds),
            "reach_50": effect("reach_50", *reach_50, n_seeds), "reach_90": effect("reach_90", *reach_90, n_seeds)}


# (case, effects, A identifiable, verdict fitting makes, direction)
CASES = [
    # the issue's demo row (batch_filter=none): called on 50%; 90% clears 0 but its lower end x1.07 is short of x1.10
    ("slower, 90% short", effects(reach_50=(1.64, 1.16, 2.33), reach_90=(1.28, 1.07, 1.53)), True,
     EFFICIENCY_SHAPER, "slower"),
    ("faster, 50% short", effects(reach_50=(0.95, 0.93, 0.97), reach_90=(0.83, 0.79, 0.88)), True,
     EFFICIENCY_SHAPER, "faster"),
    ("mixed", effects(reach_50=(1.3, 1.15, 1.5), reach_90=(0.8, 0.7, 0.88)), True, EFFICIENCY_SHAPER, "mixed"),
    ("slower, A short", effects(a=(-0.015, -0.025, -0.005), reach_90=(1.5, 1.2, 1.9)), True,
     EFFICIENCY_SHAPER, "slower"),
    ("slower, A unidentifiable", effects(a=(0.08, 0.05, 0.11), reach_50=(1.5, 1.2, 1.9)), False,
     EFFICIENCY_SHAPER, "slower"),
    ("ceiling mover", effects(a=(-0.1, -0.13, -0.07), reach_90=(1.5, 1.2, 1.9)), True, CEILING_MOVER, "lower"),
    ("null", effects(), True, NO_EFFECT, None),
    ("null, 90% short", effects(reach_90=(0.89, 0.82, 0.96)), True, NO_EFFECT, None),
    ("null, A unidentifiable", effects(a=(0.08, 0.05, 0.11)), False, NO_EFFECT, None),
    ("one seed", effects(n_seeds=1), True, NO_VERDICT, None),
]


def called_on(verdict: str, found: dict) -> list[PairedEffect]:
    """The effects a verdict rests on, by the rule itself (docs/fit-protocol.md): not read from the why."""
    if verdict == CEILING_MOVER:
        return [found["A"]]
    if verdict == EFFICIENCY_SHAPER:
        return [found[k] for k in ("reach_50", "reach_90") if found[k].significant]
    return []


def assert_reads_as_its_verdict(why: str, verdict: str, found: dict) -> None:
    called_clause, _, not_called = why.partition("; " + NOT_CALLED)
    rests_on = called_on(verdict, found)
    if verdict in (CEILING_MOVER, EFFICIENCY_SHAPER):
        assert called_clause.startswith(CALLED), why
        # the first figure named is one the verdict rests on, and every one it rests on is in the called clause
        assert any(called_clause.startswith(CALLED + effect_text(e, full=e.quantity != "A")) for e in rests_on), why
        for e in rests_on:
            assert effect_text(e).split(" [")[1] in called_clause, why
    else:
        assert not called_clause.startswith(CALLED), why
    # nothing in the called clause says a figure falls short; nothing the verdict rests on is listed as not called
    assert not any(word in called_clause for word in SHORT_WORDS), why
    for e in rests_on:
        assert effect_text(e) not in not_called, why
    # every figure that clears 0 but not its margin is named after "not called:" (not for a ceiling mover,
    # whose why is its dA alone, as fitting words it)
    if verdict in (EFFICIENCY_SHAPER, NO_EFFECT):
        for e in found.values():
            if e.quantity != "pred_at_target" and e.inside_margin:
                assert f"{effect_text(e)}, its {'lower' if e.estimate > 0 else 'upper'} end short of" in not_called, why


@pytest.mark.parametrize("case, found, identifiable, verdict, direction", CASES, ids=[c[0] for c in CASES])
def test_the_why_names_the_figure_the_verdict_was_called_on_first(case, found, identifiable, verdict, direction):
    made = _verdict(found, identifiable, budget=300.0)
    assert (made.verdict, made.direction) == (verdict, direction)  # the case is the kind it says
    why = verdict_why(made.verdict, made.direction, made.effects, ceiling_budget=300.0, fallback=made.reason)
    assert_reads_as_its_verdict(why, made.verdict, made.effects)
    if verdict == NO_VERDICT:
        assert why == made.reason and "a verdict needs >= 2" in why


def test_the_issues_demo_row_reads_as_its_verdict():
    found = effects(reach_50=(1.64, 1.16, 2.33), reach_90=(1.28, 1.07, 1.53))
    made = _verdict(found, True, budget=300.0)
    assert verdict_why(made.verdict, made.direction, made.effects) == (
        "called on compute to 50% of the base's gain x1.64 [x1.16, x2.33] (clear of x1.10); "
        "not called: compute to 90% x1.28 [x1.07, x1.53], its lower end short of the x1.10 margin")
    # fitting's own wording put "under the smallest effect called" last, as if about the verdict
    assert "under the smallest effect called" in made.reason


def test_an_unidentifiable_a_says_why_it_is_not_called():
    found = effects(a=(0.08, 0.05, 0.11), reach_50=(1.5, 1.2, 1.9))
    made = _verdict(found, False, budget=300.0)
    why = verdict_why(made.verdict, made.direction, made.effects, ceiling_budget=300.0)
    assert why.endswith("not called: dA +0.080 [+0.050, +0.110], beyond the +0.02 margin but A is not identifiable "
                        "(a ceiling claim needs fit_at >= 300)")
    pinned = verdict_why(made.verdict, made.direction, made.effects, a_pinned="its A interval reaches a bound")
    assert pinned.endswith("(its A interval reaches a bound)")


def test_every_why_in_the_synthetic_table_reads_as_its_verdict(sweep_fits):
    table = sweep_fits.table
    kinds = set(table["verdict"])
    assert {CEILING_MOVER, EFFICIENCY_SHAPER, NO_EFFECT} <= kinds  # the synthetic sweep has every called kind
    for _, row in table.iterrows():
        if row["variant"] == schema.BASE:
            assert row["reason"] == "the reference"
            continue
        c = sweep_fits.comparison.variants[row["variant"]]
        assert row["reason"] == verdict_why(c.verdict, c.direction, c.effects, ceiling_budget=c.ceiling_budget,
                                            fallback=c.reason)
        assert_reads_as_its_verdict(row["reason"], row["verdict"], c.effects)
    # DAPO: faster to 90% (called), later to 50% by ~x1.07 (clears 0, short of x1.10)
    dapo = table.set_index("variant").loc["loss=dapo", "reason"]
    assert dapo.startswith("called on compute to 90% of the base's gain x0.8")
    assert "not called: compute to 50% x1.0" in dapo and "its lower end short of the x1.10 margin" in dapo


@pytest.mark.parametrize("verdict, direction, expected", [
    (CEILING_MOVER, "lower", "Lowers the ceiling: A -0.115 [-0.147, -0.084] against the base."),
    (EFFICIENCY_SHAPER, "slower", "Slower: x1.64 [x1.16, x2.33] the base's compute to reach 50% of its gain."),
    (NO_EFFECT, None, "No detectable effect: a shift of 0.076 in A or 0.050 in pass rate at 240 s would have shown "
                      "80% of the time."),
    (NO_VERDICT, None, "No verdict: 1 paired seed; a verdict needs >= 2 (a seed whose fit failed pairs with "
                       "nothing); the estimates are in the table."),
    ("reach MDE", None, "No detectable effect: a shift of 0.076 in A or 0.050 in pass rate at 240 s, or x1.31 in "
                        "the compute to reach 50% or 90% of the gain, would have shown 80% of the time."),
])
def test_the_title_pages_sentence_gives_the_key_figure(verdict, direction, expected):
    row = {"verdict": verdict, "direction": direction, "n_seeds": 1 if verdict == NO_VERDICT else 3,
           "reason": ("1 paired seed; a verdict needs >= 2 (a seed whose fit failed pairs with nothing) (MDE: A "
                      "≥0.076, pass rate at target ≥0.050)") if verdict == NO_VERDICT else "",
           "d_A": -0.115, "d_A_lo": -0.147, "d_A_hi": -0.084, "MDE_A": 0.076, "MDE_pred": 0.05,
           "log_reach_50": math.log(1.64), "log_reach_50_lo": math.log(1.16), "log_reach_50_hi": math.log(2.33),
           "log_reach_90": math.log(1.28), "log_reach_90_lo": math.log(1.07), "log_reach_90_hi": math.log(1.53)}
    if verdict == "reach MDE":  # a table that states the compute-to-reach MDEs (the larger one is quoted)
        row.update(verdict=NO_EFFECT, MDE_reach_50=math.log(1.25), MDE_reach_90=math.log(1.31))
    assert verdict_sentence(row, target="240 s") == expected
