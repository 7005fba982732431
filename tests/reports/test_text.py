"""Plain-text tables (reports.text), the one formatter of the LOO table, the scan table and `sweep fit`."""

from reports.text import aligned_lines, sig3


def test_three_significant_figures_without_exponents():
    # >= 100: rounded to 3 significant digits and printed as an integer (11272 -> 11300, not 1.13e+04)
    assert [sig3(v) for v in (2542.0, 11272.0, 100.4, 61.27, 1.234, 0.012345)] == \
        ["2540", "11300", "100", "61.3", "1.23", "0.0123"]
    assert [sig3(v) for v in (None, float("nan"), float("inf"))] == ["-", "-", "-"]


def test_columns_pad_to_their_widest_cell_with_a_rule_under_the_header():
    # column widths: max(len("run"), len("base"), len("no_cispo")) = 8, max(len("A"), len("0.610")) = 5
    assert aligned_lines(["run", "A"], [["base", "0.610"], ["no_cispo", "-"]]) == [
        "run       A",
        "--------  -----",
        "base      0.610",
        "no_cispo  -",
    ]
