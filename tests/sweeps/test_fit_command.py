"""`sweep fit` in-process: tables, JSON, seeds, and every kind of bad CSV."""

import json
from pathlib import Path

import numpy as np
import pytest

from fitting import sigmoid_curve
from sweeps.cli import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "curves.csv")
WINDOW = ["--fit-until", "8000", "--target", "16000", "--burn-in", "1500"]


def write_csv(path, rows, header="run,compute,pass_rate"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


def curve_rows(run="base", a=0.61, start=0):
    compute = np.arange(start, 16001, 200.0)
    return [f"{run},{c:g},{p:.6f}" for c, p in zip(compute, sigmoid_curve(compute, a, 1.92, 2542, 0.3))]


def test_example_csv_table(capsys):
    assert main(["fit", EXAMPLE, *WINDOW, "--n-boot", "40"]) == 0
    out = capsys.readouterr().out
    assert "fit window [1500, 8000], method default, weights compute, 40 bootstrap draws" in out
    assert "observed = mean of points within 16000 +-3%" in out
    lines = {line.split()[0] + "/" + line.split()[1]: line for line in out.splitlines()
             if line.startswith("scalerl-") and len(line.split()) > 2 and line.split()[1] in "01"}
    assert set(lines) == {"scalerl-8b/0", "scalerl-8b/1", "scalerl-bs2048/0"}
    assert "window_ends_before_c_mid" in lines["scalerl-bs2048/0"]  # C_mid 10909 beyond the 8000 window
    assert "seed spread" in out and "window_ends_before_c_mid: C_mid" in out


def test_example_csv_json(capsys):
    assert main(["fit", EXAMPLE, *WINDOW, "--n-boot", "40", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["fit_until"] == 8000 and report["settings"]["method"] == "default"
    base = report["curves"][0]
    assert (base["run"], base["seed"], base["r0_source"], base["n_points"]) == ("scalerl-8b", "0", "compute_0", 33)
    assert abs(base["a"] - 0.61) < 0.03 and base["a_ci"][0] < base["a"] < base["a_ci"][1]
    assert base["error"] == pytest.approx(base["predicted"] - base["observed"])
    assert base["within_margin"] is True and base["n_observed"] == 3  # 15600, 15800, 16000
    assert report["seed_spread"][0]["run"] == "scalerl-8b" and report["seed_spread"][0]["n_seeds"] == 2


def test_r0_option_and_unscored_target(tmp_path, capsys):
    # no compute-0 row: --r0 supplies R0; the curve stops at 16000, so a 40000 target has no observation
    path = write_csv(tmp_path / "c.csv", curve_rows(start=200))
    assert main(["fit", path, "--fit-until", "8000", "--target", "40000", "--r0", "0.3", "--n-boot", "0",
                 "--json"]) == 0
    curve = json.loads(capsys.readouterr().out)["curves"][0]
    assert curve["r0_source"] == "given" and curve["a"] == pytest.approx(0.61, rel=1e-3)
    assert curve["observed"] is None and curve["within_margin"] is None and curve["a_ci"] is None
    assert "no_observation_at_target" in curve["flags"]


def test_missing_r0_is_a_per_curve_error(tmp_path, capsys):
    path = write_csv(tmp_path / "c.csv", curve_rows(start=200) + curve_rows(run="other"))
    assert main(["fit", path, *WINDOW, "--n-boot", "0"]) == 1
    out = capsys.readouterr().out
    assert "base: not fitted: R0 is unknown" in out and "not fitted (see notes)" in out
    assert "other" in out  # the other curve is still fitted and shown


def test_empty_pass_rates_are_dropped_with_a_note_and_inf_is_an_error(tmp_path, capsys):
    rows = curve_rows()
    rows[5] = rows[5].rsplit(",", 1)[0] + ","  # empty pass_rate: a wandb export without eval at that step
    rows += [row.replace("base", "broken") for row in curve_rows()]
    rows[-3] = "broken,15600,inf"
    path = write_csv(tmp_path / "c.csv", rows)
    assert main(["fit", path, *WINDOW, "--n-boot", "0"]) == 1
    out = capsys.readouterr().out
    assert "base: dropped 1 row(s) with an empty or NaN pass_rate" in out
    assert "broken: not fitted: pass_rate has 1 non-finite value(s)" in out


def test_unsorted_rows_are_sorted_and_duplicates_rejected(tmp_path, capsys):
    rows = curve_rows()
    path = write_csv(tmp_path / "shuffled.csv", rows[::-1])
    assert main(["fit", path, *WINDOW, "--n-boot", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["curves"][0]["a"] == pytest.approx(0.61, rel=1e-3)
    path = write_csv(tmp_path / "mixed.csv", rows + curve_rows(a=0.65)[3:6])  # two seeds without a seed column
    assert main(["fit", path, *WINDOW, "--n-boot", "0"]) == 2  # the only curve: nothing fitted
    assert "base: compute has a duplicate value 600" in capsys.readouterr().err


def test_step_column_orders_each_curve(tmp_path, capsys):
    # compute that decreases with step (a restarted run's reset counter) is an error, not silently re-sorted
    rows = [f"base,{i},{c:g},{p:.6f}" for i, (c, p) in enumerate(
        zip([0, 400, 200, 600], [0.3, 0.31, 0.32, 0.33]))]
    path = write_csv(tmp_path / "c.csv", rows, header="run,step,compute,pass_rate")
    assert main(["fit", path, "--fit-until", "600", "--target", "600", "--n-boot", "0"]) == 2
    assert "compute must be increasing; got 200 after 400" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "message"), [
    ("run,compute,score\nbase,100,0.3\n",
     "missing column(s) pass_rate; found run, compute, 1 other column(s) (not shown)"),
    ("run,compute,pass_rate\n", "has a header but no rows"),
    ("run,compute,pass_rate\nbase,100,high\n", "line 2: column pass_rate holds a value that is not a number"),
    ("", "cannot read"),
])
def test_bad_csv_is_a_usage_error(tmp_path, capsys, content, message):
    path = tmp_path / "c.csv"
    path.write_text(content)
    assert main(["fit", str(path), *WINDOW]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "message"), [
    (["--fit-until", "1000"], "--fit-until must exceed --burn-in"),
    (["--target", "0"], "argument --target: got 0, expected a finite number > 0"),
    (["--n-boot", "1"], "argument --n-boot: got 1, expected 0 or an integer in [2, 100,000]"),
    (["--bootstrap-seed", "-1"], "argument --bootstrap-seed: got -1, expected an integer in [0, 4,294,967,295]"),
    (["--method", "paper", "--fit-r0"], "--method paper takes R0 as given"),
])
def test_bad_options_are_usage_errors(capsys, extra, message):
    assert main(["fit", EXAMPLE, *WINDOW, *extra]) == 2
    assert message in capsys.readouterr().err


def test_missing_file_and_conflicting_r0_options(capsys):
    assert main(["fit", "no/such.csv", *WINDOW]) == 2
    assert "no such file: no/such.csv" in capsys.readouterr().err
    # argparse: --r0 and --fit-r0 are mutually exclusive; its error is one line, as every refusal
    assert main(["fit", EXAMPLE, *WINDOW, "--r0", "0.3", "--fit-r0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("not allowed with argument --r0 (sweep fit --help lists the arguments)")


def test_paper_method_from_the_cli(capsys):
    assert main(["fit", EXAMPLE, *WINDOW, "--method", "paper", "--n-boot", "0", "--json"]) == 0
    curves = json.loads(capsys.readouterr().out)["curves"]
    assert all(abs(c["a"] / 0.005 - round(c["a"] / 0.005)) < 1e-9 for c in curves)


def test_a_directory_is_a_usage_error(tmp_path, capsys):
    assert main(["fit", str(tmp_path), *WINDOW]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"sweep fit: error: {tmp_path} is a directory; expected a CSV file with columns run, " \
                          "compute, pass_rate"


def test_no_curve_fitted_is_one_line_and_exit_2(tmp_path, capsys):
    # "lonely" has a single point, "no_r0" has no compute-0 row and no --r0: neither can be fitted.
    path = write_csv(tmp_path / "c.csv", ["lonely,0,0.3"] + curve_rows(run="no_r0", start=200))
    assert main(["fit", path, *WINDOW, "--n-boot", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith("sweep fit: error: no curve could be fitted (2 curve(s)): lonely: the fit window")
    assert "; no_r0: R0 is unknown" in captured.err


def test_power_law_baseline_beside_the_sigmoid(tmp_path, capsys):
    # The paper's protocol on a curve saturating at A = 0.645 (B 1.70, C_mid 10909): fit 1.5k..50k, predict
    # 100k. The sigmoid finds the ceiling; the power law has none (A runs to its bound 1) and over-predicts.
    compute = np.arange(0.0, 100001.0, 500.0)
    truth = sigmoid_curve(compute, 0.645, 1.70, 10909, 0.3)
    path = write_csv(tmp_path / "c.csv", [f"base,{c:g},{p:.6f}" for c, p in zip(compute, truth)])
    args = ["fit", path, "--burn-in", "1500", "--fit-until", "50000", "--target", "100000", "--n-boot", "0"]
    assert main([*args, "--power-law", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    curve = report["curves"][0]
    assert report["settings"]["power_law"] is True
    assert curve["a"] == pytest.approx(0.645, abs=0.005)
    power = curve["power_law"]
    assert power["ceiling"] is None and power["a"] == pytest.approx(1.0, abs=1e-6)
    assert abs(power["predicted"] - curve["observed"]) > 5 * abs(curve["predicted"] - curve["observed"])
    assert power["predicted"] > curve["observed"]
    assert main([*args, "--power-law"]) == 0
    out = capsys.readouterr().out
    assert "power-law baseline R = A - D / C^B on the same window" in out
    row = next(line.split() for line in out.splitlines()[-3:] if line.startswith("base"))
    assert row[2] == f"{curve['a']:.3f}" and row[3:5] == ["none", "(A=1)"]
    assert row[6] == f"{power['predicted']:.3f}"
    # Off by default: no power-law fit in the table or the JSON.
    assert main([*args, "--json"]) == 0
    assert "power_law" not in json.loads(capsys.readouterr().out)["curves"][0]


def test_power_law_beside_curves_the_sigmoid_could_not_fit(tmp_path, capsys):
    # "no_r0": no R0, so no sigmoid, but the power law needs none; "short": 2 points, neither fits.
    rows = curve_rows() + curve_rows(run="no_r0", start=200) + ["short,0,0.3", "short,200,0.31", "short,400,0.32"]
    path = write_csv(tmp_path / "c.csv", rows)
    assert main(["fit", path, *WINDOW, "--n-boot", "0", "--power-law", "--json"]) == 1
    curves = {curve["run"]: curve for curve in json.loads(capsys.readouterr().out)["curves"]}
    assert "a" in curves["base"]["power_law"] and "fit_error" in curves["no_r0"]
    assert curves["no_r0"]["power_law"]["predicted"] > 0.3
    assert "holds 0 point(s)" in curves["short"]["power_law"]["fit_error"]
    assert main(["fit", path, *WINDOW, "--n-boot", "0", "--power-law"]) == 1
    out = capsys.readouterr().out.split("power-law baseline")[1]
    short = next(line for line in out.splitlines() if line.startswith("short"))
    assert short.split()[2:6] == ["-", "-", "-", "-"] and "not fitted: the fit window" in short


def test_fit_shape_check_over_the_curves(tmp_path, capsys):
    # 10 curves that keep rising faster than a sigmoid fitted to their first half: every run ends its
    # window above its fit, and the command says the sigmoid does not follow their shape
    compute = np.concatenate([[0.0], np.geomspace(1.0, 180.0, 30)])
    rng = np.random.default_rng(0)
    rows = []
    for run in range(10):
        positive = np.maximum(compute, 1e-9)
        truth = 0.09 + 0.45 / (1 + (10.0 / positive) ** 1.2) + 0.45 / (1 + (70.0 / positive) ** 3)
        rate = np.clip(truth + rng.normal(0, 0.01, compute.size), 0, 1)
        rows += [f"r{run},{c:g},{p:.6f}" for c, p in zip(compute, rate)]
    path = write_csv(tmp_path / "late.csv", rows)
    assert main(["fit", path, "--fit-until", "90", "--target", "180", "--n-boot", "0"]) == 0
    out = capsys.readouterr().out
    assert "fit shape: 10 of 10 runs end their fit window above their own sigmoid fit" in out
    assert "does not follow these curves' shape" in out
    assert main(["fit", path, "--fit-until", "90", "--target", "180", "--n-boot", "0", "--json"]) == 0
    shape = json.loads(capsys.readouterr().out)["fit_shape"]
    assert shape["runs"] == 10 and shape["above"] == 10 and shape["departs"] is True
    # curves the sigmoid describes: no note
    assert main(["fit", EXAMPLE, *WINDOW, "--n-boot", "0"]) == 0
    assert "fit shape" not in capsys.readouterr().out


@pytest.mark.parametrize("family, seed", [("settled_sigmoid", 2028), ("late_rise", 2029)])
def test_sweep_fit_calibrates_its_intervals_on_the_files_own_back_tests(tmp_path, capsys, family, seed):
    """The acceptance's synthetic families through the CLI: settled sigmoids covered 80-97% and flagged at most
    20%; late risers covered or flagged at least 80% (tests/fitting/test_backtest.py does the same in-process)."""
    from tests.fitting import synthetic_curves as curves

    rng = np.random.default_rng(seed)
    rows = []
    for run in range(90):
        truth = getattr(curves, family)(rng)
        rate = np.clip(truth(curves.COMPUTE) + curves.ar1_noise(rng, curves.COMPUTE.size), 0.0, 1.0)
        rate[0] = float(truth(np.array([0.0]))[0])
        rows += [f"run{run},{c:.6g},{p:.6f}" for c, p in zip(curves.COMPUTE, rate)]
    path = write_csv(tmp_path / "curves.csv", rows)
    window = ["--fit-until", f"{curves.FIT_AT:g}", "--target", f"{curves.TARGET:g}", "--n-boot", "0"]
    assert main(["fit", path, *window, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    intervals, fitted = report["prediction_intervals"], report["curves"]
    assert intervals["observed"] == len(fitted) == 90 and intervals["n_tests"] >= 90
    covered = np.array([c["covered"] for c in fitted])
    flagged = np.array([bool(c["regime"]) for c in fitted])
    assert intervals["covered"] == covered.sum()
    bias = intervals["mean_error"]  # taken off every interval's centre
    for c in fitted:
        assert c["calibrated_centre"] == pytest.approx(c["predicted"] - bias)
        assert c["calibrated_ci"][0] <= c["calibrated_centre"] <= c["calibrated_ci"][1]
    if family == "settled_sigmoid":
        assert 0.80 <= covered.mean() <= 0.97 and flagged.mean() <= 0.20, (covered.mean(), flagged.mean())
    else:
        assert (covered | flagged).mean() >= 0.80, ((covered | flagged).mean(), covered.mean(), flagged.mean())
    assert main(["fit", path, *window]) == 0  # the table says the same
    out = capsys.readouterr().out
    assert f"at the target the intervals held {covered.sum()} of 90 observed ends" in out
    assert "pred@200 [90% back-test]" in out
