"""Held-out evaluation: pass rate mean@k (temperature sampling) and greedy pass@1 on the validation split.

mean@k = (1/(P k)) sum_p sum_j 1[sample j of prompt p is correct], the paper's curve (mean@16 on
1,000 prompts there). Sampling uses random streams derived from `seed` (eval.seed: one stream
for every run by default) and, with eval.draws "per_point", the step: every run of a sweep is
scored on the same draws at the same step (evaluation_streams). Evaluating never perturbs the
training streams, and a resumed run evaluates exactly as an uninterrupted one.
Length control acts as in training (interruption is part of how the model answers); rewards are
the checker's verdict alone, never length-shaped.

eval.control_variate "reference" (reference_control_variate) estimates the same expectation with most of
its sampling noise gone, where each problem has a reference solution: per prompt i,
    q_i = p_i + (1/k) sum_j (c_ij - r_ij),
p_i the exact probability that a sample is one of the reference's responses (teacher-forced, the thinking
budget's law summed over), r_ij = 1 when sample j is one, c_ij = 1 when it is correct. E[r_ij] = p_i, so
E[q_i] = E[c_ij]: unbiased; and as a correct sample is nearly always the reference's response, c - r is
nearly always 0 and its variance is what is left of the sampling noise.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from recipe.generator import RowState, Rollout, decode_responses
from recipe.run_config import EVAL_DRAWS
from recipe.tasks import THINK_CLOSE


def evaluation_steps(every_steps: int, points_per_doubling: int, max_steps: int,
                     min_gap_steps: int = 1) -> frozenset[int]:
    """The steps at which a run evaluates: 0, then s_{i+1} = s_i + clip(floor(s_i (2^(1/n) - 1)), g, every_steps)
    with g = min_gap_steps.

    With n = points_per_doubling the points are spaced evenly in log steps (n per doubling) until
    the gap reaches every_steps, then every every_steps steps: e.g. n 3, every 20: 0 1 2 ... 8 10 12
    15 18 22 27 34 42 52 65 81 101 121 ... (23 points by step 150). The smallest gap g thins the first
    steps, where log spacing would evaluate every step: n 2, g 5, every 40: 0 5 10 15 21 29 41 57 80 113
    153 193 ... n = 0: every every_steps steps. max_steps is always an evaluation point (the run's end).
    """
    if points_per_doubling == 0:
        return frozenset([*range(0, max_steps + 1, every_steps), max_steps])
    growth = 2 ** (1 / points_per_doubling) - 1
    steps, step = [0], 0
    while step < max_steps:
        step += max(min_gap_steps, min(every_steps, math.floor(step * growth)))
        steps.append(min(step, max_steps))
    return frozenset(steps)


def compute_of(metrics: dict, step: int, unit: str) -> float:
    """The run's compute so far in `unit` (eval.compute_unit): its meter's metrics at `step`."""
    from recipe.compute import COMPUTE_AXES

    return float(step) if unit == "steps" else float(metrics.get(COMPUTE_AXES[unit], 0.0))


def evaluation_due(eval_cfg, step: int, scheduled: frozenset[int], compute: float, last_compute: float | None) -> bool:
    """Whether a run evaluates after `step`: a scheduled step (evaluation_steps) while compute < schedule_until
    (0: always) and the run's last step whatever the compute, or the first step whose compute reaches one of
    at_compute (last_compute: the compute of the run's last evaluation, None before the first)."""
    if step in scheduled and (eval_cfg.schedule_until <= 0 or compute < eval_cfg.schedule_until
                              or step == max(scheduled)):
        return True
    return any(compute >= point and (last_compute is None or last_compute < point) for point in eval_cfg.at_compute)


def samples_per_prompt(eval_cfg, compute: float) -> int:
    """Sampled answers a prompt at an evaluation made at `compute`: late_samples_per_prompt from late_from on,
    else samples_per_prompt."""
    late = eval_cfg.late_from > 0 and eval_cfg.late_samples_per_prompt > 0 and compute >= eval_cfg.late_from
    return eval_cfg.late_samples_per_prompt if late else eval_cfg.samples_per_prompt


def sampling_standard_error(per_prompt, k: int) -> float:
    """Standard error of mean@k over a fixed prompt set from its sampling alone: how far the same policy's
    pass rate moves if the evaluation drew other samples.

        se = sqrt(sum_i q_i (1 - q_i) / (k - 1)) / N

    q_i: prompt i's share of k correct samples (q_i (1 - q_i) / (k - 1) is the unbiased estimate of
    var(q_i)); N prompts. NaN for k = 1. Measured on the testbed: 128 prompts x 4 samples give ~0.012-0.02
    per evaluation, as large as the 0.02 margin a prediction is scored at (BENCHMARKS.md).
    """
    if k < 2:
        return math.nan
    q = per_prompt.double()
    return float((q * (1 - q) / (k - 1)).sum().sqrt() / q.numel())


def evaluation_streams(seed: int, draws: str, step: int, device) -> tuple[torch.Generator, np.random.Generator]:
    """The (torch, numpy) random streams of the evaluation at `step`: sampling uniforms, thinking budgets.

    draws "common": the same streams at every step (common random numbers). Consecutive points then
    differ by what the policy learned, not by fresh draws, but a point's sampling error does not
    average out along the curve: the same uniforms meet a slowly changing policy, so the error
    drifts with it and a fit follows the drift. "per_point": streams keyed by (seed, step), fresh
    at every point and the same for every run at that step (still paired across a sweep's recipes).
    """
    if draws == "common":
        return torch.Generator(device=device).manual_seed(seed * 1_000_003), np.random.default_rng([seed, 7])
    if draws != "per_point":
        raise ValueError(f"eval.draws: got {draws!r}, expected one of {', '.join(EVAL_DRAWS)}")
    torch_seed = int(np.random.SeedSequence([seed, 7, step]).generate_state(1, np.uint64)[0] >> 1)
    return torch.Generator(device=device).manual_seed(torch_seed), np.random.default_rng([seed, 7, step])


def reference_paths(tokenizer, problems, length_control, max_new_tokens: int) -> list[dict]:
    """The responses the generator emits for each problem when every token it samples is the reference's.

    The reference response is the problem's reference_thinking, `</think>`, its answer (reference_answer where the
    answer is not a response's text: a code task's tests) and <eos>. The
    generator's own row state (recipe.generator.RowState) runs over it once per thinking budget the length
    control can draw: a budget the thinking reaches forces the interruption phrase in and the answer follows
    it, a larger one lets the thinking close itself (every budget past the reference's thinking gives that
    same response, so they are merged). Returns one dict per path: problem index, `tokens` and `sampled`
    (the emitted tokens and which of them are samples, as a rollout's response and loss mask), `weight` (the
    probability of its budget). A path the length limit would cut is left out (no sample can be it correct).
    """
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    close = tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
    law = length_control.budget_distribution()
    rows = []  # (problem index, budget or None, weight, reference tokens, where its answer starts)
    for index, problem in enumerate(problems):
        thinking = tokenizer.encode(problem.reference_thinking, add_special_tokens=False) + close
        answer = problem.answer if problem.reference_answer is None else problem.reference_answer
        stream = thinking + tokenizer.encode(answer, add_special_tokens=False) + [eos]
        if law is None:
            rows.append((index, None, 1.0, stream, len(thinking)))
            continue
        merged: dict[int, float] = {}
        for budget, probability in law.items():
            budget = min(budget, len(thinking) + 1)  # past the thinking's own length: the same response
            merged[budget] = merged.get(budget, 0.0) + probability
        rows += [(index, budget, weight, stream, len(thinking)) for budget, weight in sorted(merged.items())]
    if not rows:
        return []
    budgets = None if law is None else torch.tensor([row[1] for row in rows])
    phrase = None if law is None else tokenizer.encode(length_control.interruption_phrase, add_special_tokens=False)
    state = RowState(len(rows), eos=eos, pad=pad, close=close, phrase=phrase, budgets=budgets,
                     answer_budget=length_control.answer_budget)
    limit = max(max_new_tokens, state.interrupted_width())  # as recipe.generator.generate
    width = max(len(row[3]) for row in rows)
    streams = torch.tensor([row[3] + [pad] * (width - len(row[3])) for row in rows])
    answer_at = torch.tensor([row[4] for row in rows])
    position = torch.zeros(len(rows), dtype=torch.long)  # the next reference token each row would sample
    answering = torch.zeros(len(rows), dtype=torch.bool)
    emitted, sampled_steps = [], []
    for _ in range(limit):
        # A row whose phrase has just been forced in goes on with the reference's answer.
        jump = state.interrupted & (state.phrase_at < 0) & ~answering
        position = torch.where(jump, answer_at, position)
        answering |= jump | (position >= answer_at)
        token, sampled = state.force(streams.gather(1, position.clamp_max(width - 1)[:, None]).squeeze(1))
        emitted.append(token)
        sampled_steps.append(sampled)
        state.advance(token, sampled, torch.stack(emitted[-len(close):]))
        position += sampled.long()
        if bool(state.finished.all()):
            break
    emitted, sampled_steps = torch.stack(emitted, dim=1), torch.stack(sampled_steps, dim=1)
    complete = state.finished & ~state.truncated
    paths: dict[tuple, dict] = {}  # budgets that give the same response are one path, their probabilities summed
    for r, (index, _, weight, _, _) in enumerate(rows):
        if complete[r]:
            length = int(state.lengths[r])
            tokens, sampled = tuple(emitted[r, :length].tolist()), tuple(sampled_steps[r, :length].tolist())
            path = paths.setdefault((index, tokens, sampled),
                                    {"problem": index, "tokens": tokens, "sampled": sampled, "weight": 0.0})
            path["weight"] += weight
    return list(paths.values())


def path_probabilities(model, tokenizer, prompts: list[str], paths: list[dict], *, precision, temperature: float,
                       batch_size: int) -> torch.Tensor:
    """(len(paths),) float64: the probability that the generator samples each path's tokens, exp of the sum of
    log softmax(head / temperature) over its sampled tokens (the forced ones are certain), teacher-forced
    through the trainer's own computation (recipe.trainer.sequence_logprobs, the behaviour logprobs'
    arithmetic) in batches of batch_size paths."""
    from recipe.trainer import sequence_logprobs

    device = next(model.parameters()).device
    out = torch.zeros(len(paths), dtype=torch.float64)
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        encoded = tokenizer([prompts[path["problem"]] for path in chunk], padding=True, return_tensors="pt")
        width = max(len(path["tokens"]) for path in chunk)
        response = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
        sampled = torch.zeros(len(chunk), width, dtype=torch.bool)
        for r, path in enumerate(chunk):
            response[r, :len(path["tokens"])] = torch.tensor(path["tokens"])
            sampled[r, :len(path["sampled"])] = torch.tensor(path["sampled"])
        valid = (torch.arange(width)[None, :] < torch.tensor([len(p["tokens"]) for p in chunk])[:, None]).long()
        input_ids = torch.cat([encoded.input_ids, response], dim=1).to(device)
        attention_mask = torch.cat([encoded.attention_mask, valid], dim=1).to(device)
        with torch.no_grad():
            logprobs, _ = sequence_logprobs(model, precision, input_ids, attention_mask, encoded.input_ids.shape[1],
                                            temperature)
        out[start:start + len(chunk)] = (logprobs.double().cpu() * sampled).sum(dim=1).exp()
    return out


def response_keys(rollout: Rollout) -> list[tuple[tuple, tuple]]:
    """Each row's (emitted tokens, which were sampled) up to its length: what reference_paths' paths are."""
    responses, masks = rollout.response_ids.tolist(), rollout.loss_mask.tolist()
    return [(tuple(responses[row][:length]), tuple(masks[row][:length]))
            for row, length in enumerate(rollout.lengths.tolist())]


def reference_control_variate(generator, problems, keys: list[tuple[tuple, tuple]], correct: torch.Tensor, k: int, *,
                              precision, length_control, max_new_tokens: int, temperature: float,
                              batch_size: int) -> dict[str, float]:
    """The pass rate sum_i q_i / N with q_i = p_i + (1/k) sum_j (c_ij - r_ij) (module docstring), its
    standard error from the sampling of c - r alone, sqrt(sum_i s_i^2 / k) / N (s_i^2 the unbiased variance
    of prompt i's k values of c - r), and p = sum_i p_i / N (eval/reference_probability: the reference's own
    share). keys (response_keys) and correct: the N x k sampled answers, prompt by prompt.
    The se is 0 when no prompt's k values of c - r differ (every sample either the reference's response, right,
    or another, wrong): unbiased as a variance, but its zero understates the noise (9% of the demo's points)."""
    if getattr(generator, "name", None) != "torch":  # e.g. TRL's colocated vLLM engine evaluating a trl job
        raise ValueError(f"eval.control_variate: 'reference' takes the reference's probability from the torch model, "
                         f"but this evaluation samples with the {getattr(generator, 'name', '?')} generator; use "
                         "eval.control_variate=none")
    tokenizer = generator.tokenizer
    paths = reference_paths(tokenizer, problems, length_control, max_new_tokens)
    probabilities = path_probabilities(generator.model, tokenizer, [p.prompt for p in problems], paths,
                                       precision=precision, temperature=temperature, batch_size=batch_size)
    reference = torch.zeros(len(problems), dtype=torch.float64)  # p_i
    known: list[set] = [set() for _ in problems]
    for path, probability in zip(paths, probabilities.tolist()):
        reference[path["problem"]] += path["weight"] * probability
        known[path["problem"]].add((path["tokens"], path["sampled"]))
    is_reference = torch.tensor([key in known[row // k] for row, key in enumerate(keys)], dtype=torch.float64)  # r_ij
    excess = (correct.double() - is_reference).view(len(problems), k)  # c_ij - r_ij
    per_prompt = reference + excess.mean(dim=1)
    spread = excess.var(dim=1, unbiased=True).sum() / k if k > 1 else torch.tensor(math.nan)
    return {"eval/pass_rate": float(per_prompt.mean()), "eval/pass_rate_se": float(spread.sqrt() / len(problems)),
            "eval/reference_probability": float(reference.mean())}


def score(task, tokenizer, rollout: Rollout, answers: list[str], parts: list[str | None] | None = None) -> torch.Tensor:
    """(B,) bool: the checker (of each row's part, in a mixture) accepts the answer and the sample was not cut by a
    length limit."""
    texts = decode_responses(tokenizer, rollout)
    parts = parts or [None] * len(texts)
    correct = torch.tensor(task.check_all(texts, answers, parts), dtype=torch.bool)
    return correct & ~rollout.truncated.cpu()


def evaluate(generator, task, *, precision, length_control, eval_cfg, max_new_tokens: int,
             temperature: float, seed: int, step: int = 0, policy_version: int = 0,
             compute: float = 0.0) -> dict[str, float]:
    """Eval metrics of the generator's model as it is now, weights of `policy_version` (eval/pass_rate,
    eval/greedy_pass_rate, lengths, truncation...); `generator` is the rollout's (recipe.generator.TorchGenerator
    or recipe.vllm_generator.VllmGenerator), so the curve is measured with what samples the training data.
    compute: the run's compute now (eval.compute_unit), which sizes the evaluation (samples_per_prompt).

    A mixture (recipe.mixture) scores each of its sets on the same streams in turn (evaluate_problems): the set's
    metrics under `<key>/<set>`, and the whole as the parts' weighted mean (weighted_whole).
    """
    started = time.perf_counter()
    streams = evaluation_streams(seed, eval_cfg.draws, step, generator.device)
    settings = dict(precision=precision, length_control=length_control, eval_cfg=eval_cfg,
                    max_new_tokens=max_new_tokens, temperature=temperature, policy_version=policy_version,
                    k=samples_per_prompt(eval_cfg, compute), streams=streams)
    sets = getattr(task, "evaluation_sets", None)
    if sets is None:
        metrics = evaluate_problems(generator, task, task.validation[: eval_cfg.num_prompts], **settings)
    else:
        per_set = {s.name: evaluate_problems(generator, task, s.problems[: eval_cfg.num_prompts], **settings)
                   for s in sets}
        metrics = weighted_whole(per_set, {s.name: s.weight for s in sets if s.weight is not None})
        metrics.update({f"{key}/{name}": value for name, values in per_set.items() for key, value in values.items()})
    metrics["eval/seconds"] = time.perf_counter() - started
    return metrics


def weighted_whole(per_set: dict[str, dict[str, float]], weights: dict[str, float]) -> dict[str, float]:
    """The mixture's whole from its parts' metrics: sum_i w_i m_i / W for every metric, and for a standard error
    sqrt(sum_i (w_i / W)^2 se_i^2) (the parts' samples are independent). Downstream sets are not in `weights`."""
    total = sum(weights.values())
    whole = {}
    for key in per_set[next(iter(weights))]:
        if key.endswith("_se"):
            whole[key] = math.sqrt(sum((w / total * per_set[n][key]) ** 2 for n, w in weights.items()))
        else:
            whole[key] = sum(w / total * per_set[n][key] for n, w in weights.items())
    return whole


def evaluate_problems(generator, task, problems, *, precision, length_control, eval_cfg, max_new_tokens: int,
                      temperature: float, policy_version: int, k: int, streams) -> dict[str, float]:
    """evaluate's metrics on `problems`, drawing from `streams` (torch, numpy) as they stand.

    The num_prompts x k sampled answers and the num_prompts greedy ones are generated together,
    eval_cfg.batch_size rows per generate call (the per-token work of a decode step is shared by the
    whole batch, so fewer, larger calls cost less on a small model).
    """
    tokenizer = generator.tokenizer
    torch_rng, numpy_rng = streams
    rows_of = [p for p in problems for _ in range(k)] + (list(problems) if eval_cfg.greedy else [])
    prompts, answers, parts = [p.prompt for p in rows_of], [p.answer for p in rows_of], [p.part for p in rows_of]
    sampled = len(problems) * k
    greedy_rows = torch.arange(len(prompts)) >= sampled  # greedy pass@1 rides in the same batches
    size = eval_cfg.batch_size
    corrects, lengths, truncated, interrupted, keys = [], [], [], [], []
    control_variate = eval_cfg.control_variate == "reference"
    for start in range(0, len(prompts), size):
        rows = slice(start, start + size)
        rollout = generator.generate(prompts[rows], precision=precision, length_control=length_control,
                                     max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy_rows[rows],
                                     torch_rng=torch_rng, numpy_rng=numpy_rng, policy_version=policy_version,
                                     decode_token_budget=eval_cfg.decode_token_budget)
        corrects.append(score(task, tokenizer, rollout, answers[rows], parts[rows]))
        lengths.append(rollout.lengths.cpu().float())
        truncated.append(rollout.truncated.cpu().float())
        interrupted.append(rollout.interrupted.cpu().float())
        if control_variate:
            keys += response_keys(rollout)
    correct = torch.cat(corrects)
    sampled_correct = correct[:sampled].float()
    per_prompt = sampled_correct.view(len(problems), k).mean(dim=1)  # q_i: prompt i's share correct
    metrics = {
        "eval/pass_rate": float(sampled_correct.mean()),
        "eval/pass_rate_se": sampling_standard_error(per_prompt, k),
        "eval/samples_per_prompt": float(k),
        "eval/len_mean": float(torch.cat(lengths)[:sampled].mean()),
        "eval/truncated_frac": float(torch.cat(truncated)[:sampled].mean()),
        "eval/interrupted_frac": float(torch.cat(interrupted)[:sampled].mean()),
    }
    if eval_cfg.greedy:
        metrics["eval/greedy_pass_rate"] = float(correct[sampled:].float().mean())
    if control_variate:  # the same expectation, the reference's responses counted by their exact probability
        metrics["eval/sampled_pass_rate"] = metrics["eval/pass_rate"]
        metrics["eval/sampled_pass_rate_se"] = metrics["eval/pass_rate_se"]
        metrics.update(reference_control_variate(
            generator, problems, keys[:sampled], correct[:sampled], k, precision=precision,
            length_control=length_control, max_new_tokens=max_new_tokens, temperature=temperature,
            batch_size=size))
    return metrics
