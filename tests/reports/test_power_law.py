"""The optional power-law comparison (reports/power_law.py) on the synthetic sweep, whose curves saturate."""

import matplotlib.pyplot as plt
import matplotlib.text
import pytest

from reports.pdf import report_pages
from reports.power_law import PAPER_POINT, power_law_cells, power_law_table
from tests.reports.synthetic import VARIANTS


def test_the_power_law_misjudges_the_ceiling_the_sigmoid_recovers(sweep_fits):
    table, notes = power_law_table(sweep_fits)
    assert not notes and list(table["variant"]) == list(sweep_fits.variants)
    for row in table.itertuples():
        true_a = VARIANTS[row.variant][3][0]
        assert row.sigmoid_A == pytest.approx(true_a, abs=0.03), row.variant
        # The curves saturate, yet the power law, fitted on the same window, puts the ceiling far above.
        assert row.power_law_A > true_a + 0.2, row.variant
        assert abs(row.sigmoid_error) <= 0.02, row.variant
        assert row.power_law_error == pytest.approx(row.power_law_pred - row.observed_at_target)
        assert row.power_law_pred == pytest.approx(float(row.power_law_fit.predict(240.0)))


def test_the_table_cells_mark_a_ceiling_at_the_bound(sweep_fits):
    table, _ = power_law_table(sweep_fits)
    header, rows = power_law_cells(table)
    assert header[0] == "variant" and header[4] == "pred@240\npower law"
    bounded = table["power_law_A_at_bound"].tolist()
    assert any(bounded)  # a saturating curve: the power law finds no ceiling below 1
    for row, at_bound in zip(rows, bounded):
        assert ("no ceiling" in row[2]) == at_bound


def test_the_table_page_states_the_papers_point(sweep_fits):
    pages = dict(report_pages(sweep_fits, power_law=True))
    texts = " ".join(t.get_text() for t in pages["power_law_table"].findobj(matplotlib.text.Text))
    for fig in pages.values():
        plt.close(fig)
    assert PAPER_POINT[:60].replace("\n", " ") in texts.replace("\n", " ")
    assert "misjudges the ceiling" in PAPER_POINT
