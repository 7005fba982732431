"""Compute accounting: FLOP estimates by hand, the meter's counters and its two clocks measuring real work."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from recipe.compute import COMPUTE_AXES, ComputeMeter, ModelShape, clock_for, clocks, since, sequence_cost


def test_sequence_cost_counts_tokens_and_attention_context():
    # Two sequences: 2 + 1 = 3 tokens (contexts 1+2+3 = 6) and 1 + 1 = 2 tokens (contexts 1+2 = 3).
    assert sequence_cost([2, 1], [1, 1]) == (5.0, 9.0)


def test_meter_adds_generation_and_training_flops():
    shape = ModelShape(params=1000, layers=2, width=8)
    meter = ComputeMeter()
    meter.add_generation(2.0, shape, [2], [2])  # 4 tokens, context 1+2+3+4 = 10
    # forward: 2 N tokens + 2 layers width context = 2*1000*4 + 2*2*8*10 = 8320
    assert meter.generation_flops == 8320
    meter.add_training(1.0, shape, [2], [2])
    assert meter.training_flops == 3 * 8320  # forward + backward ~ 3 forwards
    meter.wall_seconds = 3.0  # the loop charges the wall-clock: here the roles took turns (2 + 1)
    metrics = meter.metrics()
    assert metrics["compute/device_seconds"] == 3.0
    assert metrics["compute/flops"] == 4 * 8320
    assert metrics["compute/samples"] == 1 and metrics["compute/tokens"] == 2
    meter.devices = 4
    assert meter.metrics()["compute/device_hours"] == 12.0 / 3600
    restored = ComputeMeter()
    restored.load_state_dict(meter.state_dict())
    assert restored == meter


def test_meter_from_a_checkpoint_without_wall_clock_charges_generation_plus_training():
    old = ComputeMeter(generation_seconds=2.0, training_seconds=1.0).state_dict()
    del old["wall_seconds"]
    restored = ComputeMeter()
    restored.load_state_dict(old)
    assert restored.device_seconds == 3.0


def test_compute_axes_name_metrics_the_meter_logs():
    logged = set(ComputeMeter().metrics()) | {"step"}
    assert set(COMPUTE_AXES.values()) <= logged


# ------------------------------------------------------------------ clocks: CPU-seconds on CPU, wall-clock on GPUs

@pytest.fixture
def one_thread():
    """One torch thread: one busy thread's CPU time can at most match the wall-clock."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def busy_matmuls(seconds: float) -> None:
    """Real work until this thread has spent `seconds` of CPU time on it (256 x 256 fp32 matmuls; at most a minute
    of wall-clock): by CPU time, not wall-clock, so a busy machine stretches it rather than shortening the work."""
    a = torch.randn(256, 256)
    spent, deadline = time.thread_time() + seconds, time.perf_counter() + 60
    while time.thread_time() < spent and time.perf_counter() < deadline:
        a = torch.tanh(a @ a)


def test_the_clock_follows_the_device():
    assert clock_for("cpu") == "cpu"
    assert clock_for("cuda") == clock_for("cuda:1") == "wall"
    with pytest.raises(ValueError, match="compute clock 'gpu'"):
        ComputeMeter(clock="gpu")


def test_busy_work_is_charged_as_cpu_seconds_and_a_sleep_only_as_wall_clock(one_thread):
    meter = ComputeMeter(devices=2, clock="cpu")
    started = clocks()
    busy_matmuls(0.3)
    wall, cpu = since(started)
    meter.wall_seconds += wall
    meter.cpu_seconds += cpu
    assert wall >= 0.3
    # The process's CPU time holds the 0.3 s this thread spent, and no more than wall-clock for one thread
    # (+ the clocks' granularity).
    assert 0.3 <= cpu <= wall + 0.02
    started = clocks()
    time.sleep(0.3)
    wall_slept, cpu_slept = since(started)
    meter.wall_seconds += wall_slept
    meter.cpu_seconds += cpu_slept
    assert wall_slept >= 0.3 and cpu_slept < 0.02  # waiting costs no CPU time
    metrics = meter.metrics()
    assert metrics["compute/device_seconds"] == metrics["compute/cpu_seconds"] == cpu + cpu_slept
    assert metrics["compute/wall_device_seconds"] == 2 * (wall + wall_slept)
    meter.clock = "wall"
    assert meter.metrics()["compute/device_seconds"] == 2 * (wall + wall_slept)


def test_cpu_seconds_count_the_work_of_every_thread_of_the_process(one_thread):
    # The work runs on a second thread (torch releases the GIL) while this one sleeps in join():
    # process CPU time must still include it, as it includes torch's intra-op threads.
    worker_cpu = []

    def work() -> None:
        started = time.thread_time()
        busy_matmuls(0.3)
        worker_cpu.append(time.thread_time() - started)

    started = clocks()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    _, cpu = since(started)
    assert worker_cpu[0] >= 0.3
    assert cpu >= worker_cpu[0] - 0.01


def test_the_clock_survives_a_checkpoint_and_an_old_checkpoint_resumes_with_wall_clock():
    meter = ComputeMeter(devices=2, clock="cpu", wall_seconds=3.0, cpu_seconds=5.0)
    restored = ComputeMeter(clock="wall")
    restored.load_state_dict(meter.state_dict())
    assert restored == meter and restored.device_seconds == 5.0
    # A checkpoint written before the CPU clock (no clock, no cpu_seconds), resumed on CPU: the run
    # keeps charging wall-clock x devices, never a mix of the two clocks.
    old = ComputeMeter(devices=2, wall_seconds=3.0).state_dict()
    del old["clock"], old["cpu_seconds"]
    resumed = ComputeMeter(devices=2, clock=clock_for("cpu"))
    resumed.load_state_dict(old)
    assert resumed.clock == "wall" and resumed.device_seconds == 6.0


def test_metrics_log_both_clocks_under_their_keys():
    metrics = ComputeMeter(devices=4, clock="cpu", wall_seconds=1.5, cpu_seconds=2.5).metrics()
    assert metrics["compute/device_seconds"] == 2.5
    assert metrics["compute/cpu_seconds"] == 2.5
    assert metrics["compute/wall_device_seconds"] == 6.0
    assert metrics["compute/wall_seconds"] == 1.5
