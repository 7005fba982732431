"""A scan's report view (reports/scan.py) on a synthetic scan whose truth is known: values in order, A rising."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml

from fitting import sigmoid_curve
from reports import schema

# value of rollout.prompts_per_batch -> true (A, B, C_mid): a larger batch lifts the ceiling and needs more compute
TRUTH = {16: (0.56, 2.0, 25.0), 32: (0.62, 2.0, 35.0), 64: (0.70, 2.0, 50.0)}
R0, SEEDS, RUN_SD = 0.2, (0, 1, 2), 0.004
BUDGET = {"unit": "device_seconds", "burn_in": 0.0, "fit_at": 160.0, "target": 320.0, "observed_window": 0.05}


def make_scan(root):
    """A scan's sweep directory as the driver writes it: the reference 32 is the base."""
    sweep_dir, plan = root / "scan", []
    for value, (a, b, c_mid) in TRUTH.items():
        axis = schema.BASE if value == 32 else "rollout.prompts_per_batch"
        variant = schema.BASE if value == 32 else f"rollout.prompts_per_batch={value}"
        for seed in SEEDS:
            rng, shared = np.random.default_rng([value, seed]), np.random.default_rng([7, seed])
            run_id = f"v{value}s{seed}"
            run_dir = sweep_dir / "runs" / run_id
            run_dir.mkdir(parents=True)
            config = {"rollout": {"prompts_per_batch": value, "samples_per_prompt": 8}, "seed": seed}
            (run_dir / schema.CONFIG_FILE).write_text(yaml.safe_dump(config))
            own_a = a + shared.normal(0, RUN_SD) + rng.normal(0, RUN_SD)
            lines = []
            for step in range(0, 330, 5):
                compute = float(step)
                noise = 0.003 * shared.normal() + 0.003 * rng.normal() if step else 0.0
                pass_rate = float(sigmoid_curve(compute, own_a, b, c_mid, R0)) + noise
                lines.append({"step": step, schema.PASS_RATE: pass_rate, "compute/device_seconds": compute})
            (run_dir / schema.METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
            plan.append({"run_id": run_id, "axis": axis, "choice": str(value), "variant": variant, "seed": seed,
                         "run_dir": f"runs/{run_id}"})
    (sweep_dir / schema.PLAN_FILE).write_text(json.dumps(plan))
    meta = {"name": "synthetic-scan", "base": "scalerl", "seeds": list(SEEDS), "budget": BUDGET,
            "scan": {"key": "rollout.prompts_per_batch", "values": [32, 16, 64], "reference": 32}}
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps(meta))
    return sweep_dir


@pytest.fixture(scope="module")
def scan_fits(tmp_path_factory):
    from reports.sweep_data import load_sweep
    from reports.tables import fit_sweep

    return fit_sweep(load_sweep(make_scan(tmp_path_factory.mktemp("scan"))), n_boot=100)


def test_each_value_is_fitted_in_value_order_and_the_larger_batch_moves_the_ceiling(scan_fits):
    from reports.scan import format_scan_table, scan_rows

    rows = scan_rows(scan_fits)
    assert [r["value"] for r in rows] == [16.0, 32.0, 64.0]  # numeric order, not "16" < "32" < "64" by chance
    assert [r["reference"] for r in rows] == [False, True, False]
    for r, truth in zip(rows, TRUTH.values()):
        assert abs(r["A"] - truth[0]) < 0.02 and r["A_ci"][0] <= r["A"] <= r["A_ci"][1]
        assert r["B_ci"][0] <= r["B"] <= r["B_ci"][1] and r["C_mid_ci"][0] <= r["C_mid"] <= r["C_mid_ci"][1]
        assert len(r["seed_A"]) == 3
    assert rows[0]["verdict"] == "ceiling mover (lower A)" and rows[2]["verdict"] == "ceiling mover (higher A)"
    text = format_scan_table(scan_fits)
    assert text.splitlines()[0].startswith("scan of rollout.prompts_per_batch against the reference 32")
    assert [line.split()[0] for line in text.splitlines()[3:]] == ["16", "32", "64"]


def test_the_table_names_the_reference_and_each_change_from_it(scan_fits):
    table = scan_fits.table
    assert list(table["changed"]) == ["reference: rollout.prompts_per_batch = 32",
                                      "rollout.prompts_per_batch: 32 -> 16", "rollout.prompts_per_batch: 32 -> 64"]


def test_the_report_has_a_scan_page_and_its_table(scan_fits, tmp_path):
    from reports.pdf import report_pages, write_report

    pages = report_pages(scan_fits)
    plt.close("all")
    names = [name for name, _ in pages]
    assert names.index("scan") == names.index("evidence") + 1 and "scan_table" in names
    pngs = write_report(scan_fits, tmp_path / "report.pdf", tmp_path / "figures")
    assert tmp_path / "figures" / "scan.png" in pngs


def test_a_loo_report_has_no_scan_page(sweep_fits):
    from reports.pdf import report_pages

    pages = report_pages(sweep_fits)
    plt.close("all")
    assert "scan" not in [name for name, _ in pages]


def test_the_report_plans_the_next_sweep_from_its_own_noise(scan_fits):
    from reports.pdf import report_pages
    from reports.power import sweep_noise

    noise = sweep_noise(scan_fits)
    # three seeds, two values against the reference: the two-way residual has 2 x (3 - 1) degrees of freedom
    assert noise.quantities["A"].df == 4 and not noise.quantities["A"].lower_bound
    # the synthetic runs move A by sd RUN_SD per run, shared and own: a paired seed differs by sd 2 x RUN_SD
    assert 0.3 * 2 * RUN_SD < noise.quantities["A"].s < 3 * 2 * RUN_SD
    pages = report_pages(scan_fits)
    plt.close("all")
    assert "power" in [name for name, _ in pages]
