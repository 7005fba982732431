"""The MLflow UI on a sweep's tracking store, on localhost, as a process group that stops as a whole.

    url, stop = start_ui("sqlite:////abs/sweep/mlflow.db", experiment_id="1")
    ...                                   # url: http://127.0.0.1:<port>/#/experiments/1/runs
    stop()

Measured on the reference machine (shared/SERVICES.md): `mlflow ui --workers 1` with job execution off
is ready in ~5 s (the default spawns ~12 processes and takes ~15 s); killing only its pid leaves
workers behind, hence its own session (setsid) and a signal to the whole group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class UiError(RuntimeError):
    """The UI did not come up; the message carries the tail of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS picks it; a race with another process is possible but rare)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on host:port now (a bind succeeds)."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def runs_url(base_url: str, experiment_id: str | None) -> str:
    """The experiment's runs table (its landing page is a GenAI overview in MLflow 3)."""
    return f"{base_url}/#/experiments/{experiment_id}/runs" if experiment_id is not None else f"{base_url}/"


def jobs_url(runs_table_url: str, sort_metric: str = "fit/A") -> str:
    """The runs table showing the sweep's job runs (not the parent) sorted by `sort_metric`, largest first.

    Without a filter the UI folds child runs under their parent; a filter on the job tag lists them flat.
    """
    from urllib.parse import quote, urlencode

    from reports import schema

    query = urlencode({"searchFilter": f"tags.`{schema.TAG_RUN_ID}` LIKE '%'", "orderByKey": f"metrics.`{sort_metric}`",
                       "orderByAsc": "false"}, quote_via=quote)
    return f"{runs_table_url}?{query}"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


class StopUi:
    """Calling it stops the UI's process group; `pid` is the group id (for `kill -- -PID` by hand)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.pid = process.pid

    def __call__(self) -> None:
        _stop_group(self.process)


def _stop_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)  # the group's id is the leader's pid (start_new_session)
        process.wait(timeout=grace)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)


def start_ui(tracking_uri: str, *, port: int | None = None, host: str = "127.0.0.1",
             experiment_id: str | None = None, artifacts_destination: str | Path | None = None,
             log_path: str | Path | None = None, timeout: float = 90.0) -> tuple[str, StopUi]:
    """Start `mlflow ui` on `tracking_uri`, wait until it answers, return (runs-table URL, stop).

    port None picks a free one. Output goes to log_path (default: a file beside a SQLite store, else
    /dev/null). stop() terminates the whole process group (SIGTERM, then SIGKILL after 10 s).
    """
    if port is not None and not port_is_free(port, host):  # else the health check would find the other server
        raise UiError(f"port {port} on {host} is in use (another server, perhaps another `sweep ui`); pick another "
                      "--port, or leave --port out for a free one")
    port = port or free_port(host)
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri, "--host", host,
               "--port", str(port), "--workers", "1"]
    if artifacts_destination is not None:
        command += ["--artifacts-destination", str(artifacts_destination)]
    if log_path is None and tracking_uri.startswith("sqlite:///"):
        log_path = Path(tracking_uri[len("sqlite:///"):]).parent / "mlflow-ui.log"
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    log = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL
    try:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    finally:
        if log is not subprocess.DEVNULL:
            log.close()
    base = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout
    while process.poll() is not None or not _answers(f"{base}/health"):  # answered by ours, not a stranger
        if process.poll() is not None or time.monotonic() > deadline:
            code = process.poll()
            reason = f"exited with status {code}" if code is not None else f"gave no answer in {timeout:g} s"
            _stop_group(process)
            tail = Path(log_path).read_text(errors="replace")[-1500:] if log_path else ""
            raise UiError(f"mlflow ui on port {port} {reason}; log {log_path}:\n{tail}")
        time.sleep(0.3)
    return runs_url(base, experiment_id), StopUi(process)
