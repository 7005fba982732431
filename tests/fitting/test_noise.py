"""The sweep-level evaluation-noise check: median logged se against a quarter of the margin."""

from __future__ import annotations

import math

import pytest

from fitting import evaluation_noise_check
from fitting.noise import SE_LIMIT


def test_the_check_takes_the_median_of_the_finite_standard_errors():
    noise = evaluation_noise_check([0.004, math.nan, 0.006, 0.002, 0.010])
    assert (noise.points, noise.median_se) == (4, pytest.approx(0.005))
    assert evaluation_noise_check([0.003, 0.004, 0.02]).median_se == 0.004
    assert evaluation_noise_check([]) is None and evaluation_noise_check([math.nan]) is None


def test_the_limit_is_a_quarter_of_the_margin_and_the_note_names_the_fix():
    assert SE_LIMIT == pytest.approx(0.005)
    assert not evaluation_noise_check([0.0045] * 5).too_noisy
    noisy = evaluation_noise_check([0.015] * 5)  # the shipped 128 prompts x 4 samples on the testbed
    assert noisy.too_noisy and noisy.samples_factor == pytest.approx(9.0)
    note = noisy.note()
    for text in ("0.015", "0.005", "9x", "eval.num_prompts", "eval.samples_per_prompt", "task.validation_size"):
        assert text in note
