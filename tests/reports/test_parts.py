"""A mixture sweep's fits per part: the table on a chosen part, its verdicts, and the report's parts and
downstream pages, on curves built for it (tests/reports/synthetic.py's sigmoids, split into parts)."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml

from fitting import sigmoid_curve
from reports import schema

BASE_TRUTH = (0.62, 2.0, 60.0)  # synthetic.VARIANTS' base: A, B, C_mid


def mixture_sweep(root):
    """The synthetic base and its fp32-head-off variant (A 0.52), split into two parts and a downstream set:
    part `hard` is each run's own curve (the variant's ceiling is lower), part `easy` the base's truth for every
    run (the variant changes nothing there), the whole their mean; `transfer` follows the whole at 0.8 x."""
    from tests.reports.synthetic import R0, make_sweep

    sweep_dir = make_sweep(root, variants=("base", "precision=fp32_head=false"))
    for job in json.loads((sweep_dir / schema.PLAN_FILE).read_text()):
        run_dir = sweep_dir / job["run_dir"]
        rng = np.random.default_rng([7, job["seed"], job["variant"] == "base"])
        lines = [json.loads(line) for line in (run_dir / schema.METRICS_FILE).read_text().splitlines()]
        for line in lines:
            if schema.PASS_RATE not in line:
                continue
            hard = line[schema.PASS_RATE]
            easy = float(sigmoid_curve(line["compute/device_seconds"], *BASE_TRUTH, R0))
            easy += float(rng.normal(0, 0.004)) if line["step"] else 0.0
            line.update({"eval/pass_rate/hard": hard, "eval/pass_rate/easy": easy,
                         schema.PASS_RATE: (hard + easy) / 2, "eval/pass_rate/transfer": 0.8 * (hard + easy) / 2})
            for name in ("hard", "easy", "transfer"):
                line[f"eval/pass_rate_se/{name}"] = line[schema.PASS_RATE_SE]
        (run_dir / schema.METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
        config = yaml.safe_load((run_dir / schema.CONFIG_FILE).read_text())
        config["task"] = {"parts": {"hard": {"min_digits": 3}, "easy": {"max_digits": 2}},
                          "downstream": {"transfer": {"min_digits": 4}}}
        (run_dir / schema.CONFIG_FILE).write_text(yaml.safe_dump(config))
    return sweep_dir


@pytest.fixture(scope="module")
def mixture_data(tmp_path_factory):
    from reports.sweep_data import load_sweep

    return load_sweep(mixture_sweep(tmp_path_factory.mktemp("mixture")))


def test_the_sweep_knows_its_parts_and_downstream_sets(mixture_data):
    from reports.parts import part_names

    assert mixture_data.metric_names() == ["whole", "hard", "easy", "transfer"]
    assert mixture_data.downstream_names() == ["transfer"] and part_names(mixture_data) == ["hard", "easy"]
    hard = mixture_data.for_metric("hard")
    assert hard.budget.metric == "hard" and len(hard.evals) == len(mixture_data.evals)
    with pytest.raises(ValueError, match="metric 'medium': the runs logged no eval/pass_rate/medium; they logged "
                                         "whole, hard, easy, transfer"):
        mixture_data.for_metric("medium")


def test_verdicts_read_on_a_part_differ_from_the_whole_where_the_runs_differ(mixture_data):
    from reports.tables import fit_sweep

    variant = "precision=fp32_head=false"
    verdicts = {metric: fit_sweep(mixture_data.for_metric(metric), n_boot=100).table.set_index("variant")
                for metric in ("whole", "hard", "easy")}
    assert verdicts["hard"].loc[variant, "verdict"] == "ceiling mover"  # A 0.52 against 0.62 on that part
    assert verdicts["easy"].loc[variant, "verdict"] == "no detectable effect"  # the same truth as the base's
    assert verdicts["whole"].loc[variant, "verdict"] != verdicts["easy"].loc[variant, "verdict"]
    assert verdicts["hard"].loc[variant, "delta_A"] < verdicts["whole"].loc[variant, "delta_A"] < -0.02


def test_sweep_report_on_a_part_writes_its_own_table_and_the_report_has_the_mixture_pages(tmp_path):
    from reports.pdf import report_pages
    from reports.publish import report_sweep
    from reports.sweep_data import load_sweep

    sweep_dir = mixture_sweep(tmp_path)
    outputs = report_sweep(sweep_dir, metric="hard", n_boot=50, log_mlflow=False, echo=lambda *_: None)
    assert outputs.csv == sweep_dir / "report_hard.csv" and outputs.pdf.is_file()
    assert not (sweep_dir / schema.LOO_TABLE_FILE).exists()  # the sweep's own table (the whole) is untouched
    assert "eval/pass_rate/hard (a mixture's set, not the whole)" in outputs.fits.caption()

    from reports.tables import fit_sweep

    pages = report_pages(fit_sweep(load_sweep(sweep_dir), n_boot=50))
    try:
        check_mixture_pages(dict(pages))
    finally:
        for _, page in pages:
            plt.close(page)


def check_mixture_pages(pages: dict) -> None:
    assert {"parts", "downstream"} <= set(pages)
    parts_axes = [ax for ax in pages["parts"].axes if ax.get_title()]
    assert [ax.get_title().split(" (")[0] for ax in parts_axes] == ["part hard", "part easy"]
    legend = [text.get_text() for text in parts_axes[0].get_legend().get_texts()]
    assert any(label.startswith("precision=fp32_head=false: window fit A = 0.5") for label in legend)
    (transfer,) = [ax for ax in pages["downstream"].axes if ax.get_title()]
    assert len(transfer.get_lines()) == 6 + 1  # each run's path (2 variants x 3 seeds), then y = x
    for line in transfer.get_lines()[:-1]:
        x, y = line.get_data()
        assert np.allclose(y, 0.8 * np.asarray(x))


def test_a_budget_metric_no_run_logged_is_named(tmp_path):
    from reports.sweep_data import SweepDataError, load_sweep

    sweep_dir = mixture_sweep(tmp_path)
    meta = json.loads((sweep_dir / schema.SWEEP_FILE).read_text())
    meta["budget"]["metric"] = "medium"
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps(meta))
    with pytest.raises(SweepDataError, match="budget.metric: 'medium' names no pass rate the runs logged"):
        load_sweep(sweep_dir)
