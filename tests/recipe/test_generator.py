"""Generator: behaviour logprobs, head precision in both roles, interruption (RowState), determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from components import REGISTRIES
from recipe.generator import decode_responses, generate
from recipe.model import load_model_dir
from recipe.tasks import THINK_CLOSE
from recipe.trainer import sequence_logprobs

NO_LENGTH_CONTROL = REGISTRIES["length_control"].build({"name": "none"})
# Prompts of different lengths exercise left padding.
PROMPTS = ["07+05=<think>", "7+5=<think>", "19+01=<think>", "123+9=<think>"] * 4


class SpyPrecision:
    """Wraps a precision component and records the dtype of every logits tensor it returns."""

    def __init__(self, fp32_head: bool) -> None:
        self.inner = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": fp32_head})
        self.fp32_head = fp32_head
        self.dtypes: list[torch.dtype] = []

    def head_logits(self, hidden, weight, bias=None):
        logits = self.inner.head_logits(hidden, weight, bias)
        self.dtypes.append(logits.dtype)
        return logits


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model_dir(tiny_model_dir)


def sample(model, tokenizer, precision, length_control=NO_LENGTH_CONTROL, seed=0, **kwargs):
    return generate(model, tokenizer, PROMPTS, precision=precision, length_control=length_control,
                    max_new_tokens=12, torch_rng=torch.Generator().manual_seed(seed),
                    numpy_rng=np.random.default_rng(seed), **kwargs)


def recompute(model, precision, rollout):
    logprobs, _ = sequence_logprobs(model, precision, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)
    return logprobs


def test_fp32_behaviour_logprobs_equal_trainer_logprobs(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    rollout = sample(model, tokenizer, precision, interruption)
    assert rollout.interrupted.any()  # forced phrase tokens are in the context the trainer sees
    gap = (recompute(model, precision, rollout) - rollout.old_logprobs)[rollout.loss_mask].abs().max()
    assert gap < 1e-5
    assert rollout.old_logprobs[rollout.loss_mask].lt(0).all()
    assert (rollout.old_logprobs[~rollout.loss_mask] == 0).all()


def test_finished_rows_leave_the_decode_batch_and_logprobs_still_equal_the_trainers(model_and_tokenizer,
                                                                                   monkeypatch):
    import recipe.generator

    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    monkeypatch.setattr(recipe.generator, "COMPACT_FRACTION", 0.01)  # drop finished rows at every step
    rows_seen = []
    original = precision.head_logits

    def spy(hidden, weight, bias=None):
        rows_seen.append(hidden.shape[0])
        return original(hidden, weight, bias)

    precision.head_logits = spy
    rollout = sample(model, tokenizer, precision)
    lengths = rollout.lengths
    assert lengths.min() < lengths.max()  # rows finished at different steps
    # After the shortest row finished, the head saw fewer rows than the batch holds.
    assert rows_seen[0] == len(PROMPTS) and min(rows_seen) < len(PROMPTS)
    assert rows_seen[int(lengths.min())] == int((lengths > lengths.min()).sum())
    precision.head_logits = original
    gap = (recompute(model, precision, rollout) - rollout.old_logprobs)[rollout.loss_mask].abs().max()
    assert gap < 1e-5
    assert (rollout.response_ids[torch.arange(rollout.response_ids.shape[1])[None, :] >= lengths[:, None]]
            == tokenizer.pad_token_id).all()


@pytest.mark.parametrize("fp32_head, expected", [(True, torch.float32), (False, torch.bfloat16)])
def test_head_dtype_is_the_same_in_generator_and_trainer(model_and_tokenizer, fp32_head, expected):
    model, tokenizer = model_and_tokenizer
    precision = SpyPrecision(fp32_head)
    rollout = sample(model, tokenizer, precision)
    generator_dtypes = set(precision.dtypes)
    precision.dtypes.clear()
    recompute(model, precision, rollout)
    assert generator_dtypes == {expected}
    assert set(precision.dtypes) == {expected}


def test_bf16_head_gives_a_measurable_mismatch(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    fp32 = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    bf16 = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": False})
    rollout = sample(model, tokenizer, bf16)
    # bf16 logits are rounded to 8 bits of mantissa: logprobs differ from the fp32 ones by ~1e-2.
    gap = (recompute(model, fp32, rollout) - rollout.old_logprobs)[rollout.loss_mask].abs().mean()
    assert 1e-4 < gap < 0.5


def test_interruption_forces_the_phrase_at_the_budget(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    control = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 3, "max_thinking": 3, "answer_budget": 2})
    rollout = sample(model, tokenizer, precision, control)
    phrase = tokenizer.encode(control.interruption_phrase, add_special_tokens=False)
    close = tokenizer.convert_tokens_to_ids(THINK_CLOSE)
    for row in range(len(PROMPTS)):
        tokens = rollout.response_ids[row, : rollout.lengths[row]].tolist()
        mask = rollout.loss_mask[row, : rollout.lengths[row]].tolist()
        if rollout.interrupted[row]:
            # exactly 3 sampled thinking tokens, the phrase (not trained on), then <= 2 answer tokens
            assert close not in tokens[:3]
            assert tokens[3:3 + len(phrase)] == phrase and mask[3:3 + len(phrase)] == [False] * len(phrase)
            assert len(tokens) <= 3 + len(phrase) + 2 and all(mask[3 + len(phrase):])
        else:  # closed its thinking within the budget, or stopped before it
            assert close in tokens[:3] or (tokens[-1] == tokenizer.eos_token_id and len(tokens) <= 3)
    assert rollout.interrupted.any()
    texts = decode_responses(tokenizer, rollout)
    assert all(control.interruption_phrase in t for t, i in zip(texts, rollout.interrupted) if i)


def test_sampling_is_deterministic_per_seed_and_greedy_ignores_it(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    first, again = sample(model, tokenizer, precision, seed=3), sample(model, tokenizer, precision, seed=3)
    assert torch.equal(first.input_ids, again.input_ids)
    assert torch.equal(first.old_logprobs, again.old_logprobs)
    assert not torch.equal(first.input_ids, sample(model, tokenizer, precision, seed=4).input_ids)
    greedy = [sample(model, tokenizer, precision, seed=s, greedy=True).input_ids for s in (0, 1)]
    assert torch.equal(*greedy)


def test_greedy_rows_take_the_argmax_and_the_other_rows_sample(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    greedy_rows = torch.arange(len(PROMPTS)) % 2 == 1
    rollouts = [sample(model, tokenizer, precision, seed=s, greedy=greedy_rows) for s in (0, 1)]
    for rollout in rollouts:
        # each chosen token's logprob is the row's largest (within round-off) exactly on the greedy rows
        hidden_logp = recompute_all(model, precision, rollout)
        chosen = rollout.old_logprobs
        best = hidden_logp.max(dim=-1).values
        is_argmax = ((best - chosen) < 1e-5) | ~rollout.loss_mask
        assert is_argmax[greedy_rows].all()
        assert not is_argmax[~greedy_rows].all()  # sampled rows draw below the argmax somewhere
    assert not torch.equal(rollouts[0].input_ids[~greedy_rows], rollouts[1].input_ids[~greedy_rows])
    with pytest.raises(ValueError, match=r"greedy must be a bool or a \(16,\) tensor"):
        sample(model, tokenizer, precision, greedy=torch.ones(3, dtype=torch.bool))


def recompute_all(model, precision, rollout):
    """Log-probabilities (B, T, V) of every token at every response position under the same weights."""
    from recipe.model import lm_parts
    from recipe.trainer import response_hidden_states

    with torch.no_grad():
        hidden = response_hidden_states(model, rollout.input_ids, rollout.attention_mask, rollout.prompt_width)
        logits = precision.head_logits(hidden, lm_parts(model).head.weight, lm_parts(model).head.bias)
        return torch.log_softmax(logits.float(), dim=-1)


def test_truncation_at_max_new_tokens(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head"})
    rollout = generate(model, tokenizer, PROMPTS, precision=precision, length_control=NO_LENGTH_CONTROL,
                       max_new_tokens=2, torch_rng=torch.Generator().manual_seed(0))
    assert rollout.response_ids.shape[1] == 2
    assert rollout.truncated.all() and (rollout.lengths == 2).all()


def test_inverse_cdf_sampling_draws_each_token_with_its_probability():
    from recipe.sampling import inverse_cdf_sample

    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    logp = probs.log().expand(20_000, -1)  # log 0 = -inf: that token can never be drawn
    tokens = inverse_cdf_sample(logp, torch.rand(20_000, generator=torch.Generator().manual_seed(0)))
    counts = torch.bincount(tokens, minlength=4).float() / 20_000
    assert counts[1] == 0
    assert torch.allclose(counts, probs, atol=0.015)  # 3 binomial sds at n = 20,000
    # the inverse CDF: u just below a boundary takes the token below it, u at the top the last one
    edges = inverse_cdf_sample(probs.log().expand(4, -1), torch.tensor([0.0, 0.4999, 0.5001, 0.9999]))
    assert edges.tolist() == [0, 0, 2, 3]


def test_a_rows_draws_do_not_depend_on_which_rows_are_still_decoding(model_and_tokenizer, monkeypatch):
    # Row r's t-th token is decided by its own uniform, so dropping finished rows from the decode batch
    # (at every step) or never dropping them samples the very same responses.
    import recipe.generator

    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    monkeypatch.setattr(recipe.generator, "COMPACT_FRACTION", 2.0)  # never compact
    kept = sample(model, tokenizer, precision, seed=3)
    monkeypatch.setattr(recipe.generator, "COMPACT_FRACTION", 0.01)  # compact at every step
    compacted = sample(model, tokenizer, precision, seed=3)
    assert kept.lengths.min() < kept.lengths.max()  # rows did finish at different steps
    assert torch.equal(kept.input_ids, compacted.input_ids)


@pytest.mark.parametrize("shared_prefix_decoding, preallocate_from", [(True, 0), (True, 10**9), (False, 0)])
def test_a_decode_token_budget_bounds_the_batch_and_samples_the_same(model_and_tokenizer, monkeypatch,
                                                                      shared_prefix_decoding, preallocate_from):
    # decode_token_budget splits the call's rows into groups decoded one after the other; each row
    # keeps its own uniforms and thinking budget, so tokens, masks, flags and (to round-off) logprobs
    # are those of the one big batch, greedy rows, interruptions and prompts split across groups included.
    import recipe.generator
    import recipe.prefix_attention

    monkeypatch.setattr(recipe.prefix_attention, "PREALLOCATE_FROM_TOKENS", preallocate_from)
    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    greedy = torch.arange(len(PROMPTS)) % 5 == 0
    whole = sample(model, tokenizer, precision, interruption, seed=7, greedy=greedy,
                   shared_prefix_decoding=shared_prefix_decoding)
    budget = 3 * (whole.prompt_width + 16)
    batch_tokens = []
    original = recipe.generator.DecodeBatch.__init__

    def record(self, model, distinct_ids, distinct_mask, row_prompt, **kwargs):
        batch_tokens.append(len(row_prompt) * (distinct_ids.shape[1] + kwargs["limit"]))
        original(self, model, distinct_ids, distinct_mask, row_prompt, **kwargs)

    monkeypatch.setattr(recipe.generator.DecodeBatch, "__init__", record)
    parts = sample(model, tokenizer, precision, interruption, seed=7, greedy=greedy,
                   shared_prefix_decoding=shared_prefix_decoding, decode_token_budget=budget)
    assert len(batch_tokens) >= 6 and max(batch_tokens) <= budget  # 16 rows in groups of at most 3
    assert whole.interrupted.any() and not whole.interrupted.all()
    for key in ("input_ids", "attention_mask", "loss_mask", "lengths", "truncated", "interrupted", "versions"):
        assert torch.equal(getattr(parts, key), getattr(whole, key)), key
    assert (parts.old_logprobs - whole.old_logprobs).abs().max() < 1e-5
    gap = (recompute(model, precision, parts) - parts.old_logprobs)[parts.loss_mask].abs().max()
    assert gap < 1e-5


@pytest.mark.parametrize("compact_fraction", [2.0, 0.01])  # never drop finished rows; drop them at every step
@pytest.mark.parametrize("preallocate_from", [0, 10**9])  # key/value buffers of the limit; concatenation
def test_shared_prefix_decoding_samples_what_per_row_caches_sample(model_and_tokenizer, monkeypatch,
                                                                   compact_fraction, preallocate_from):
    # The prompt's keys and values kept once per prompt (recipe.prefix_attention) compute the same
    # attention as a cache row per sample: same tokens, logprobs within fp32 round-off, and still
    # equal to the trainer's recompute. PROMPTS interleaves the samples of a prompt (rows p0 p1 p2 p3
    # p0 ...) and pads prompts of different lengths on the left.
    import recipe.generator

    import recipe.prefix_attention

    model, tokenizer = model_and_tokenizer
    monkeypatch.setattr(recipe.generator, "COMPACT_FRACTION", compact_fraction)
    monkeypatch.setattr(recipe.prefix_attention, "PREALLOCATE_FROM_TOKENS", preallocate_from)
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    per_row = sample(model, tokenizer, precision, interruption, seed=5, shared_prefix_decoding=False)
    shared = sample(model, tokenizer, precision, interruption, seed=5)
    assert per_row.lengths.min() < per_row.lengths.max()
    assert torch.equal(shared.input_ids, per_row.input_ids)
    assert torch.equal(shared.loss_mask, per_row.loss_mask)
    assert (shared.old_logprobs - per_row.old_logprobs).abs().max() < 1e-5
    gap = (recompute(model, precision, shared) - shared.old_logprobs)[shared.loss_mask].abs().max()
    assert gap < 1e-5


def tiny_hf_model(kind: str, tokenizer, **extra):
    """A randomly initialised small model of a transformers architecture, 4 query heads on 2 key/value heads."""
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, f"{kind}Config")(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id, **extra)
    return getattr(transformers, f"{kind}ForCausalLM")(config).eval()


@pytest.mark.parametrize("kind", ["Llama", "Qwen2", "Qwen3"])  # grouped-query heads; Qwen3 normalises q and k
def test_shared_prefix_attention_gives_the_models_own_logprobs_and_gradients(kind):
    import copy

    from recipe.model import build_tokenizer
    from recipe.prefix_attention import supports_shared_prefix
    from recipe.trainer import sequence_logprobs

    tokenizer = build_tokenizer()
    model = tiny_hf_model(kind, tokenizer)
    assert supports_shared_prefix(model)
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    per_row = sample(model, tokenizer, precision, seed=1, shared_prefix_decoding=False)
    shared = sample(model, tokenizer, precision, seed=1)
    assert torch.equal(shared.input_ids, per_row.input_ids)
    assert (shared.old_logprobs - per_row.old_logprobs).abs().max() < 1e-5
    # The trainer's response forward through the shared prefix against the model's own attention
    # over every full row, in float64 (values and gradients).
    reference = copy.deepcopy(model).double()
    logits = reference(input_ids=shared.input_ids, attention_mask=shared.attention_mask,
                       position_ids=(shared.attention_mask.cumsum(-1) - 1).clamp_min(0)).logits
    P = shared.prompt_width
    exact = logits[:, P - 1:-1].log_softmax(-1).gather(-1, shared.input_ids[:, P:, None]).squeeze(-1)
    logprobs, _ = sequence_logprobs(model, precision, shared.input_ids, shared.attention_mask, P)
    mask = shared.loss_mask
    assert float((logprobs.double() - exact).detach()[mask].abs().max()) < 1e-5
    weights = torch.linspace(-1, 1, mask.numel()).view_as(mask) * mask
    (weights.double() * exact).sum().backward()
    (weights * logprobs).sum().backward()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, atol=1e-5 * float(theirs.grad.abs().max()) + 1e-9,
                                   rtol=1e-4)


@pytest.mark.parametrize("kind, extra", [("Qwen2", {"use_sliding_window": True, "sliding_window": 8}),
                                         ("Mistral", {"sliding_window": 8}), ("Gemma2", {})])
def test_models_whose_attention_is_not_full_causal_keep_their_own(kind, extra):
    from recipe.model import build_tokenizer
    from recipe.prefix_attention import supports_shared_prefix

    assert not supports_shared_prefix(tiny_hf_model(kind, build_tokenizer(), **extra))


def test_a_model_outside_the_attention_interface_decodes_with_per_row_caches(model_and_tokenizer, monkeypatch):
    from recipe.prefix_attention import SharedPrefixCache

    model, tokenizer = model_and_tokenizer
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    appended = []
    original = SharedPrefixCache.append
    monkeypatch.setattr(SharedPrefixCache, "append", lambda self, *args: appended.append(1) or original(self, *args))
    sample(model, tokenizer, precision)
    assert appended  # the shared-prefix attention ran
    appended.clear()
    monkeypatch.setattr(type(model), "_supports_attention_backend", False)
    fallback = sample(model, tokenizer, precision)
    assert not appended and model.config._attn_implementation == "sdpa"
    assert torch.equal(fallback.input_ids, sample(model, tokenizer, precision, shared_prefix_decoding=False).input_ids)


# RowState on hand-made token streams: eos 2, pad 0, `</think>` = [7, 8], the phrase [5, 6, 7, 8] (it
# ends by closing the thinking), thinking tokens 9, answer tokens 3; 1 marks a sample the phrase replaces.
EOS, PAD, CLOSE, PHRASE = 2, 0, [7, 8], [5, 6, 7, 8]


def drive(rows, samples: list[list[int]]):
    """Run force/advance over per-row sample streams (B, steps) as generate's loop does; (emitted, sampled)."""
    emitted, masks = [], []
    for column in torch.tensor(samples).T:
        token, sampled = rows.force(column)
        emitted.append(token)
        masks.append(sampled)
        rows.advance(token, sampled, torch.stack(emitted[-len(CLOSE):]))
        if rows.finished.all():
            break
    return torch.stack(emitted, dim=1).tolist(), torch.stack(masks, dim=1).long().tolist()


def test_row_state_interrupts_at_the_budget_and_lets_a_closed_or_ended_thought_be():
    from recipe.generator import RowState

    rows = RowState(4, eos=EOS, pad=PAD, close=CLOSE, phrase=PHRASE, budgets=[2, 3, 4, 1], answer_budget=2)
    assert rows.interrupted_width() == 4 + len(PHRASE) + 2  # the largest budget, the phrase, the answer
    emitted, sampled = drive(rows, [
        [9, 9, 1, 1, 1, 1, 3, 3, 3],  # 2 thinking tokens: phrase forced, 2 answer tokens, out of answer budget
        [9, 7, 8, 3, 2, 9, 9, 9, 9],  # closes </think> after 2 of its 3: no interruption, answers, <eos>
        [9, 2, 9, 9, 9, 9, 9, 9, 9],  # <eos> while still thinking: finished, neither truncated nor interrupted
        [9, 1, 1, 1, 1, 2, 9, 9, 9],  # interrupted after 1, then <eos> as its first answer token
    ])
    assert emitted == [[9, 9, 5, 6, 7, 8, 3, 3],
                       [9, 7, 8, 3, 2, 0, 0, 0],
                       [9, 2, 0, 0, 0, 0, 0, 0],
                       [9, 5, 6, 7, 8, 2, 0, 0]]
    assert sampled == [[1, 1, 0, 0, 0, 0, 1, 1],  # phrase tokens are not the model's samples
                       [1, 1, 1, 1, 1, 0, 0, 0],
                       [1, 1, 0, 0, 0, 0, 0, 0],
                       [1, 0, 0, 0, 0, 1, 0, 0]]
    assert rows.lengths.tolist() == [8, 5, 2, 6]
    assert rows.interrupted.tolist() == [True, False, False, True]
    assert rows.truncated.tolist() == [True, False, False, False]
    assert rows.finished.all()


def test_row_state_closing_think_one_token_late_is_interrupted_and_without_budgets_only_eos_ends():
    from recipe.generator import RowState

    # Budget 2: the first half of </think> is the second thinking token, so the phrase comes before the close.
    late = RowState(1, eos=EOS, pad=PAD, close=CLOSE, phrase=PHRASE, budgets=[2], answer_budget=1)
    emitted, _ = drive(late, [[9, 7, 8, 8, 8, 8, 3, 3]])
    assert emitted == [[9, 7, 5, 6, 7, 8, 3]] and late.interrupted.all() and late.truncated.all()
    free = RowState(2, eos=EOS, pad=PAD, close=CLOSE)  # no budgets: no interruption whatever the thinking
    assert free.interrupted_width() == 0
    emitted, sampled = drive(free, [[9, 9, 9, 9, 2], [9, 2, 9, 9, 9]])
    assert emitted == [[9, 9, 9, 9, 2], [9, 2, 0, 0, 0]] and sampled == [[1] * 5, [1, 1, 0, 0, 0]]
    assert free.lengths.tolist() == [5, 2] and not free.interrupted.any() and not free.truncated.any()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_static_decoding_samples_what_the_eager_loop_samples(tiny_model_dir, dtype):
    # recipe/static_decode.py steps every row at static shapes (finished rows stay in the batch, attention
    # over a fixed view with the later positions masked, every per-token value kept on the device): on CPU
    # the same steps run without CUDA graphs. Interruptions, greedy rows beside sampled ones, prompts of
    # different lengths and a limit past two view lengths: the same tokens, masks, flags and versions as
    # the eager loop, logprobs to round-off, and still the trainer's.
    import recipe.static_decode

    model, tokenizer = load_model_dir(tiny_model_dir, dtype=dtype)
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    greedy = torch.arange(len(PROMPTS)) % 5 == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipe.static_decode, "FIRST_VIEW", 4)  # views 4, 8, 12: each serves some steps
        static = sample(model, tokenizer, precision, interruption, seed=7, greedy=greedy, static_decode=True)
    eager = sample(model, tokenizer, precision, interruption, seed=7, greedy=greedy, static_decode=False)
    assert eager.interrupted.any() and not eager.interrupted.all() and eager.lengths.min() < eager.lengths.max()
    for key in ("input_ids", "attention_mask", "loss_mask", "lengths", "truncated", "interrupted", "versions"):
        assert torch.equal(getattr(static, key), getattr(eager, key)), key
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    assert (static.old_logprobs - eager.old_logprobs).abs().max() < tolerance
    gap = (recompute(model, precision, static) - static.old_logprobs)[static.loss_mask].abs().max()
    assert gap < tolerance


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # bf16: the decode copy's weights follow the update
def test_static_decoding_records_the_version_of_weights_loaded_between_steps(tiny_model_dir, dtype):
    # PipelineRL loads new weights between two decode steps (on_decode_step); each token records the version
    # whose forward pass produced its logits. Static decoding calls it at the same points as the eager
    # loop, so the versions (and the tokens: the weights change at the same step) are the same. With a
    # bf16 body the static steps decode with a copy of the Linear weights in bf16 (compute_dtype_copy),
    # copied again when a new version is loaded.
    model, tokenizer = load_model_dir(tiny_model_dir, dtype=dtype)
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})

    def run(static_decode):
        original = {name: p.detach().clone() for name, p in model.named_parameters()}
        calls = []

        def on_decode_step(tokens, context):
            calls.append(None)
            if len(calls) == 5:  # new weights in place, as SharedMemoryWeights.receive loads them
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(0.9)
            return 0 if len(calls) < 5 else 1

        try:
            return sample(model, tokenizer, precision, seed=3, on_decode_step=on_decode_step,
                          static_decode=static_decode)
        finally:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(original[name])

    eager, static = run(False), run(True)
    assert eager.versions.min() == 0 and eager.versions.max() == 1
    for key in ("input_ids", "loss_mask", "lengths", "versions"):
        assert torch.equal(getattr(static, key), getattr(eager, key)), key
    assert (static.old_logprobs - eager.old_logprobs).abs().max() < (1e-5 if dtype == "float32" else 2e-2)
    # A later call decodes with the weights as they are then (the copy follows the master weights).
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.1)
    later_static, later_eager = run(True), run(False)
    assert torch.equal(later_static.input_ids, later_eager.input_ids)
    assert not torch.equal(later_static.old_logprobs, static.old_logprobs)


def test_view_lengths_double_up_to_the_token_limit():
    from recipe.static_decode import view_lengths

    assert view_lengths(160) == [64, 128, 160]
    assert view_lengths(64) == [64]
    assert view_lengths(10) == [10]
    assert view_lengths(1024)[-3:] == [256, 512, 1024]


def test_compiled_static_steps_sample_what_the_eager_loop_samples(tiny_model_dir):
    # static_decode.COMPILE runs each round's body step through torch.compile (Inductor), compiled once per view
    # length during the view's first rounds. On CPU fp32 the fused kernels give the eager loop's tokens, masks,
    # flags and versions, and its logprobs to round-off (on an H200 the fused bf16 arithmetic rounds otherwise:
    # BENCHMARKS "Decode with the host out of the loop").
    import recipe.static_decode

    model, tokenizer = load_model_dir(tiny_model_dir)
    precision = REGISTRIES["precision"].build({"name": "lm_head", "fp32_head": True})
    interruption = REGISTRIES["length_control"].build(
        {"name": "interruption", "min_thinking": 2, "max_thinking": 5, "answer_budget": 3})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipe.static_decode, "FIRST_VIEW", 8)  # views 8, 12: two compilations
        patch.setattr(recipe.static_decode, "COMPILE", True)
        compiled = sample(model, tokenizer, precision, interruption, seed=7, static_decode=True)
    eager = sample(model, tokenizer, precision, interruption, seed=7, static_decode=False)
    assert eager.interrupted.any()
    for key in ("input_ids", "attention_mask", "loss_mask", "lengths", "truncated", "interrupted", "versions"):
        assert torch.equal(getattr(compiled, key), getattr(eager, key)), key
    assert (compiled.old_logprobs - eager.old_logprobs).abs().max() < 1e-5
