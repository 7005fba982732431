"""`sweep report` and `sweep ui` (sweeps/report_command.py, sweeps/ui_command.py) run in-process."""

import os
import re
import signal
import urllib.request

import pandas as pd

from reports import schema
from sweeps.cli import main
from tests.reports.synthetic import log_to_mlflow, make_sweep


def test_report_writes_table_pdf_and_figures_and_prints_the_table(tmp_path, capsys):
    sweep_dir = make_sweep(tmp_path, variants=("base", "precision=fp32_head=false"))
    assert main(["report", str(sweep_dir), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "precision=fp32_head=false" in out and "ceiling mover (lower A)" in out
    assert f"report:    {sweep_dir / schema.REPORT_FILE}" in out and "MLflow:" not in out
    table = pd.read_csv(sweep_dir / schema.LOO_TABLE_FILE)
    assert list(table.columns) == list(schema.LOO_COLUMNS) and len(table) == 2
    assert (sweep_dir / schema.REPORT_FILE).stat().st_size > 10_000
    assert sorted(p.name for p in (sweep_dir / schema.FIGURES_DIR).iterdir()) == [
        "curves.png", "deltas.png", "diagnostics.png", "fixed_a_slopes.png", "variants.png"]


def test_report_power_law_adds_the_comparison_pages(tmp_path, capsys):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    pdf = tmp_path / "with-power-law.pdf"
    assert main(["report", str(sweep_dir), "--n-boot", "20"]) == 0  # the sweep directory's own report
    own = {path: path.read_bytes() for path in (sweep_dir / schema.REPORT_FILE, sweep_dir / schema.LOO_TABLE_FILE)}
    assert main(["report", str(sweep_dir), "--n-boot", "20", "--power-law", "-o", str(pdf)]) == 0
    # a report elsewhere takes its table and figures with it; the sweep directory's own set is left as it was
    assert "power_law.png" in {p.name for p in (tmp_path / "with-power-law_figures").iterdir()}
    assert pdf.stat().st_size > 10_000
    assert {path: path.read_bytes() for path in own} == own
    # the LOO table itself is the same with or without the comparison
    assert list(pd.read_csv(pdf.with_suffix(".csv")).columns) == list(schema.LOO_COLUMNS)


def test_report_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    assert main(["report"]) == 2
    assert "give a SWEEP_DIR, or --tracking-uri" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such sweep directory" in capsys.readouterr().err
    assert main(["report", "--tracking-uri", "sqlite:///x.db", "-o", "x.pdf"]) == 2
    assert "give --experiment" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--n-boot", "1"]) == 2


def test_ui_detached_prints_the_runs_url_and_a_kill_command(tmp_path, capsys):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    log_to_mlflow(sweep_dir)
    assert main(["ui", str(sweep_dir), "--detach"]) == 0
    out = capsys.readouterr().out
    pgid = int(re.search(r"kill -- -(\d+)", out).group(1))
    try:
        url = re.search(r"experiment runs: (\S+)", out).group(1)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/#/experiments/\d+/runs", url)
        with urllib.request.urlopen(url.split("/#")[0] + "/health", timeout=10) as response:
            assert response.status == 200
        assert "jobs by fit/A:" in out
    finally:
        os.killpg(pgid, signal.SIGTERM)
        os.waitpid(pgid, 0)  # the group leader is this process's child: reap it


def test_ui_without_a_store_exits_2(tmp_path, capsys):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    assert main(["ui", str(sweep_dir)]) == 2
    assert "no MLflow store" in capsys.readouterr().err


def test_ui_on_a_port_in_use_and_on_a_store_that_is_gone_exit_2_naming_the_fix(tmp_path, capsys):
    import json
    import socket

    sweep_dir = make_sweep(tmp_path, variants=("base",))
    log_to_mlflow(sweep_dir)
    with socket.socket() as taken:  # any server on the port: a `sweep ui` must not take its answer for its own
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["ui", str(sweep_dir), "--port", str(port), "--detach"]) == 2
        assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    # a moved or copied sweep directory keeps its store's old absolute URI: named, not created empty
    info_path = sweep_dir / schema.MLFLOW_FILE
    info = json.loads(info_path.read_text())
    gone = tmp_path / "elsewhere" / "mlflow.db"
    info[schema.MLFLOW_TRACKING_URI] = f"sqlite:///{gone}"
    info_path.write_text(json.dumps(info))
    assert main(["ui", str(sweep_dir), "--detach"]) == 2
    assert f"names the store sqlite:///{gone}, which does not exist" in capsys.readouterr().err
    assert not gone.exists() and not gone.parent.exists()
