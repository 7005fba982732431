"""Compute accounting: FLOP estimates by hand and the meter's counters."""

from __future__ import annotations

from recipe.compute import COMPUTE_AXES, ComputeMeter, ModelShape, sequence_cost


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
