"""The PDF report looked at the way a person sees it: every page rendered to PNG with pdftoppm."""

import subprocess

import matplotlib.pyplot as plt
import matplotlib.text
import numpy as np
import pytest

from reports.pdf import FIGURES, report_pages, write_report
from tests.reports.tools import ensure_tool, ink_fraction

# title, table, evidence, power, curves, variants, fixed-A slopes, deltas, diagnostics, diagnostics table, setup,
# config diff, notes (the notes page exists because the DAPO run lacks interrupted_frac and CISPO runs lack clip_frac)
EXPECTED_PAGES = ["title", "table", "evidence", "power", "curves", "variants", "fixed_a_slopes", "deltas",
                  "diagnostics", "diagnostics_table", "setup", "config_diff", "notes"]


def page_names(fits) -> list[str]:
    pages = report_pages(fits)
    for _, fig in pages:
        plt.close(fig)
    return [name for name, _ in pages]


@pytest.fixture(scope="module")
def rendered(sweep_fits, tmp_path_factory):
    """The report written to PDF and every page rendered to PNG at 60 dpi: (pdf, [png, ...], figure PNGs)."""
    pdftoppm = ensure_tool("pdftoppm", "install-poppler.sh")
    folder = tmp_path_factory.mktemp("report")
    pdf = folder / "report.pdf"
    figure_pngs = write_report(sweep_fits, pdf, folder / "figures")
    subprocess.run([pdftoppm, "-r", "60", "-png", str(pdf), str(folder / "page")], check=True, timeout=120)
    return pdf, sorted(folder.glob("page-*.png")), figure_pngs


def test_page_count_and_order(rendered, sweep_fits):
    _, pages, _ = rendered
    assert len(pages) == len(EXPECTED_PAGES)
    assert page_names(sweep_fits) == EXPECTED_PAGES


def test_the_power_law_pages_come_only_when_asked(sweep_fits):
    pages = report_pages(sweep_fits, power_law=True)
    for _, fig in pages:
        plt.close(fig)
    at = EXPECTED_PAGES.index("deltas") + 1
    assert [name for name, _ in pages] == EXPECTED_PAGES[:at] + ["power_law", "power_law_table"] + EXPECTED_PAGES[at:]
    assert "power_law" in FIGURES  # saved as PNG like the other figures


def test_every_figure_page_carries_a_drawing(rendered):
    _, pages, figure_pngs = rendered
    for index, name in enumerate(EXPECTED_PAGES):
        ink = ink_fraction(pages[index])
        # figures fill their page; text pages (title, tables, diffs) still have visible text
        assert ink > (0.04 if name in FIGURES else 0.005), f"page {index + 1} ({name}) looks blank: {ink:.4f}"
    assert [p.stem for p in figure_pngs] == [name for name in EXPECTED_PAGES if name in FIGURES]
    assert all(ink_fraction(p) > 0.04 for p in figure_pngs)


def test_pages_are_landscape_a4(rendered):
    import matplotlib.image

    _, pages, _ = rendered
    height, width = matplotlib.image.imread(str(pages[2])).shape[:2]
    assert width == pytest.approx(11.69 * 60, abs=2) and height == pytest.approx(8.27 * 60, abs=2)


def _undrawn_texts(fig) -> set:
    """Texts of hidden axes, and tick labels the locators made beyond an axis' view limits: never drawn."""
    hidden = set()
    for ax in fig.axes:
        if not ax.get_visible():
            hidden.update(ax.findobj(matplotlib.text.Text))
        for axis in (ax.xaxis, ax.yaxis):
            scale = np.log10 if axis.get_scale() == "log" else (lambda x: x)  # a log axis' slack is relative
            low, high = sorted(scale(np.asarray(axis.get_view_interval())))
            slack = (high - low) * 1e-6
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                location = tick.get_loc()
                if location <= 0 and scale is np.log10 or not low - slack <= scale(location) <= high + slack:
                    hidden.update((tick.label1, tick.label2))
    return hidden


def test_text_is_at_least_9_points_and_inside_the_page(sweep_fits):
    for name, fig in report_pages(sweep_fits, power_law=True):  # every page, the optional ones included
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        page = fig.bbox
        hidden = _undrawn_texts(fig)
        for text in fig.findobj(matplotlib.text.Text):
            if not text.get_visible() or not text.get_text().strip() or text in hidden:
                continue
            assert text.get_fontsize() >= 9, f"{name}: {text.get_text()[:40]!r} at {text.get_fontsize()} pt"
            box = text.get_window_extent(renderer)
            inside = page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1
            assert inside, f"{name}: {text.get_text()[:60]!r} runs off the page"
        plt.close(fig)


def test_the_table_page_shows_the_fitted_numbers(rendered, sweep_fits):
    pdf, _, _ = rendered
    pdftotext = ensure_tool("pdftotext", "install-poppler.sh")
    text = subprocess.run([pdftotext, "-layout", "-f", "2", "-l", "2", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    for row in sweep_fits.table.itertuples():
        assert f"{row.A:.3f} " in text and f"{row.B:.2f}" in text, row.variant
    assert "efficiency shaper" in text and "ceiling mover" in text and "no detectable effect" in text
    title = " ".join(subprocess.run([pdftotext, "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True, text=True,
                                    check=True).stdout.split())  # lines joined: the title page wraps its text
    assert "synthetic-loo" in title and "fit to 120, predicted at 240" in title and "test machine (2 cores)" in title
    assert "Lowers the ceiling" in title and "No detectable effect" in title
    at = EXPECTED_PAGES.index("setup") + 1
    setup = " ".join(subprocess.run([pdftotext, "-f", str(at), "-l", str(at), str(pdf), "-"], capture_output=True,
                                    text=True, check=True).stdout.split())
    assert "fit at 120; target 240" in setup and "test machine (2 cores)" in setup and "cispo" in setup


def test_a_sweep_with_nothing_fitted_still_gets_a_report_saying_why(tmp_path):
    from reports.sweep_data import load_sweep
    from reports.tables import fit_sweep
    from tests.reports.synthetic import make_sweep

    data = load_sweep(make_sweep(tmp_path, variants=("base", "loss=dapo")))
    data.evals = data.evals[data.evals["step"] <= 5]  # one evaluation after step 0: too few points to fit
    fits = fit_sweep(data, n_boot=20)
    assert not fits.variants and fits.comparison is None
    pages = report_pages(fits)
    notes = pages[-1][1].texts[-1].get_text()
    for _, fig in pages:
        plt.close(fig)
    assert [name for name, _ in pages] == [  # nothing fitted
        "title", "table", "curves", "diagnostics", "diagnostics_table", "setup", "config_diff", "notes"]
    assert "base: not fitted: the fit window" in notes
    write_report(fits, tmp_path / "report.pdf")
    assert (tmp_path / "report.pdf").stat().st_size > 10_000


def test_a_legend_too_long_for_the_room_under_its_table_gets_its_own_page():
    # a 9-variant LOO table with wrapped names ends low on the page: its legend (flags, fit-shape
    # note) used to run off the bottom edge and was lost
    from reports import figures
    from reports.pdf import _legend_below

    def texts_inside(fig):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        return all(fig.bbox.y0 - 1 <= text.get_window_extent(renderer).y0
                   for text in fig.findobj(matplotlib.text.Text) if text.get_text().strip())

    legend = "\n".join(f"legend line {i}" for i in range(30))
    pages = _legend_below(figures._new_figure("table"), 0.3, legend, "table: how to read it")
    assert len(pages) == 2 and all(texts_inside(page) for page in pages)
    assert not any("legend line" in t.get_text() for t in pages[0].findobj(matplotlib.text.Text))
    assert any(t.get_text() == "table: how to read it" for t in pages[1].findobj(matplotlib.text.Text))
    short = _legend_below(figures._new_figure("table"), 0.6, "one\ntwo", "unused")
    assert len(short) == 1 and texts_inside(short[0])
    for page in pages + short:
        plt.close(page)


def test_the_title_page_states_the_verdict_rule_the_table_uses(sweep_fits):
    # The verdicts come from seed-paired effects (fitting.seeds); the title page must not describe an older rule.
    from reports.title_page import setup_page, title_page

    for page in (title_page(sweep_fits), setup_page(sweep_fits)):
        text = " ".join(t.get_text() for t in page.texts).replace("\n", " ")
        assert "paired over seeds" in text and "compute to reach 50% or 90%" in text
        assert "combined A interval" not in text
        plt.close(page)


def test_the_title_page_reads_as_a_papers_first_page(sweep_fits):
    # a title, one line of what was swept, then one sentence per variant with its key figure, in proportional type
    from reports.title_page import findings, title_page, title_text
    from reports.verdicts import verdict_sentence

    fig = title_page(sweep_fits)
    texts = [t.get_text().replace("\n", " ") for t in fig.texts]
    title, swept = title_text(sweep_fits)
    assert texts[0] == title == "Leave-one-out ablation: synthetic-loo"
    assert texts[1] == swept == ("base scalerl · 3 variants x 3 seeds (20, 21, 22) · budget in device-seconds: fit to "
                                 "120, predicted at 240 · test machine (2 cores) · 2026-11-21 10:00")
    page = " ".join(texts)
    table = sweep_fits.table
    for _, row in table[table["variant"] != "base"].iterrows():
        sentence = verdict_sentence(row, target="240 device-seconds")
        assert sentence in page, row["variant"]
    assert f"A {table.loc[table['variant'] == 'base', 'A'].iloc[0]:.3f}" in page  # the base's own fit
    # verdicts first: the base, then the ceiling mover and the efficiency shaper, then the null
    assert [row[0] for row in findings(sweep_fits)] == ["base", "precision=fp32_head=false", "loss=dapo",
                                                        "aggregation=sample_mean"]
    assert not any("mono" in t.get_fontfamily()[0].lower() for t in fig.texts)
    plt.close(fig)


# the shipped LOO's variants (sweeps/loo.yaml), longest names included
LOO_NAMES = ["loss=dapo", "aggregation=sample_mean", "advantage_norm=prompt", "batch_filter=none",
             "curriculum=uniform", "length_control=length_penalty(max_length=16, cache_length=2)",
             "off_policy=ppo_off_policy(k=8)", "precision=fp32_head=false"]


@pytest.mark.parametrize("variants", [8, 30])
def test_a_long_sweep_still_fits_its_title_page(sweep_fits, monkeypatch, variants):
    # the shipped LOO's eight variants, each with a two-line verdict and a two-line sentence: smaller type, never
    # off the page; past what 9-point type holds, the last rows give way to a line saying how many more there are
    from reports import title_page as module

    names = (LOO_NAMES * 4)[:variants]
    long_rows = [(name, "interruption -> length_penalty", "efficiency shaper\n(mixed)", "Mixed: x1.31 [x1.12, x1.52] "
                  "the base's compute to reach 50% of its gain, x0.71 [x0.62, x0.81] to reach 90%.") for name in names]
    monkeypatch.setattr(module, "findings", lambda fits: long_rows)
    fig = module.title_page(sweep_fits)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for text in fig.texts:
        box = text.get_window_extent(renderer)
        assert text.get_fontsize() >= 9, text.get_text()[:40]
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 + 1 and fig.bbox.y0 <= box.y0, text.get_text()[:60]
    # the sentence column's lines stay inside their column (the page's right margin)
    sentences = [t for t in fig.texts if t.get_text().startswith("Mixed")]
    assert all(t.get_window_extent(renderer).x1 <= 0.96 * fig.bbox.x1 for t in sentences)
    page = " ".join(t.get_text() for t in fig.texts)
    if variants == 8:
        assert len(sentences) == 8 and "more variants" not in page
    else:
        assert 5 < len(sentences) < 30 and f"{30 - len(sentences)} more variants: the table" in page
    plt.close(fig)


def test_an_interval_clipped_at_a_pass_rate_of_1_draws_as_a_bar_from_its_ends():
    """A bias larger than the headroom puts the centre (prediction - bias) above 1, where the interval is clipped:
    the bar spans the interval itself (it once asked matplotlib for a negative error and the report failed)."""
    from fitting.forecast import Forecast
    from reports.figures import _draw_backtests

    forecast = Forecast(target=10.0, predicted=0.95, scale=0.01, radius=0.1, level=0.9, regime=(), bias=-0.16)
    assert forecast.centre > 1.0 and forecast.interval == (1.0, 1.0)  # centre 1.11 +- 0.1, clipped
    fig, ax = plt.subplots()
    _draw_backtests(ax, [], forecast, "C0", start=1.0)
    segments = [s for c in ax.collections for s in c.get_segments()]
    assert segments and np.allclose([segments[0][0][1], segments[0][1][1]], sorted(forecast.interval))
    plt.close(fig)
