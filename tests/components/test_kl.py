"""KL penalties: k1 and k3 by hand, their unbiasedness, the reference's reset schedule, bad parameters."""

import math

import pytest
import torch

from components.kl import NoKlPenalty, ReferenceKlPenalty

LN2 = math.log(2.0)


def test_k1_and_k3_by_hand():
    # d = log pi_ref - log pi.  pi 0.5, ref 0.25: d = -ln 2 -> k1 = ln 2 = 0.6931, k3 = 1/2 + ln 2 - 1 = 0.1931
    #                           pi 0.25, ref 0.5: d = +ln 2 -> k1 = -ln 2,        k3 = 2 - ln 2 - 1 = 0.3069
    #                           equal:            d = 0     -> k1 = k3 = 0
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.3]]))
    ref = torch.log(torch.tensor([[0.25, 0.5, 0.3]]))
    torch.testing.assert_close(ReferenceKlPenalty(estimator="k1").penalty(logprobs, ref),
                               torch.tensor([[LN2, -LN2, 0.0]]))
    torch.testing.assert_close(ReferenceKlPenalty(estimator="k3").penalty(logprobs, ref),
                               torch.tensor([[0.5 + LN2 - 1, 2 - LN2 - 1, 0.0]]))
    assert torch.equal(NoKlPenalty().penalty(logprobs, ref), torch.zeros(1, 3))


def test_both_estimators_average_to_the_kl_over_samples_from_the_policy():
    # pi = (0.7, 0.2, 0.1), ref = (0.4, 0.4, 0.2): KL(pi || ref) = sum pi log(pi / ref)
    pi, ref = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    kl = float((pi * (pi / ref).log()).sum())  # 0.7 ln 1.75 + 0.2 ln 0.5 + 0.1 ln 0.5 = 0.1838
    assert kl == pytest.approx(0.7 * math.log(1.75) - 0.3 * LN2)
    tokens = torch.multinomial(pi, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    for estimator in ("k1", "k3"):
        values = ReferenceKlPenalty(estimator=estimator).penalty(pi.log()[tokens], ref.log()[tokens])
        assert float(values.mean()) == pytest.approx(kl, abs=0.005)
    assert float(ReferenceKlPenalty(estimator="k3").penalty(pi.log()[tokens], ref.log()[tokens]).min()) >= 0


def test_the_reference_resets_after_every_n_steps_or_never():
    r1 = ReferenceKlPenalty(coef=0.001, reset_every=400)  # DeepSeek-R1
    assert [step for step in range(1, 1201) if r1.reset_due(step)] == [400, 800, 1200]
    assert not any(ReferenceKlPenalty().reset_due(step) for step in range(1, 1000))
    assert not any(NoKlPenalty().reset_due(step) for step in range(1, 1000))
    assert ReferenceKlPenalty().reference and not NoKlPenalty().reference


@pytest.mark.parametrize("params, key", [({"coef": 0}, "coef"), ({"coef": 11}, "coef"),
                                         ({"estimator": "k2"}, "estimator"), ({"reset_every": -1}, "reset_every")])
def test_bad_parameters_name_their_key(params, key):
    with pytest.raises(ValueError, match=key):
        ReferenceKlPenalty(**params)


def test_a_recipe_without_a_kl_penalty_keeps_its_run_id():
    from recipe.config import load_recipe, run_id

    base = load_recipe(None, [])
    assert base.kl_penalty == {"name": "none"}
    assert run_id(base) == run_id(load_recipe(None, ["kl_penalty=none"]))
    assert run_id(base) != run_id(load_recipe(None, ["kl_penalty=reference"]))
