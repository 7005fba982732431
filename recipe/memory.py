"""How much device memory the native engine needs: bytes per parameter and per token, from a model's shape.

docs/memory.md's table of the largest model and response one 80 GB GPU holds is computed here
(scripts/docs_memory_table.py), and tests/recipe/test_memory.py holds every per-token figure equal
to what the code itself keeps: the bytes autograd saves for the backward of the trainer's own forward
(recipe.trainer.sequence_logprobs), the generator's key/value buffers, the model's parameter count.

Trainer, one optimizer step over a micro-batch of N tokens (the native trainer keeps fp32 weights):

    state       = 16 B x parameters          fp32 weights 4 + gradients 4 + AdamW's two moments 8
    activations = N x (L x a_layer + a_rest) every activation kept
                = N x (L x 4h + a_rest)   optimizer.gradient_checkpointing: each layer's
                  input (the fp32 residual stream, 4h bytes); the one layer the backward recomputes at a
                  time did not show in the H200's peaks (docs/memory.md), so it is not counted
    transient   = rows x heads x 512 x (P + T) x 16 B   one block of attention scores (TRAINING_QUERY_BLOCK)
                + 3 x HEAD_CHUNK_BYTES                  one chunk of the head's logits, log-softmax, gradient

a_layer (bytes per token and decoder layer, measured with autograd's saved-tensor hooks; h hidden,
q = heads x head_dim, i the MLP width, k = key/value heads x head_dim):

    fp32 body:       24h + 12q + 16i + 16k + 8
    bf16/fp16 body:  26h + 10q +  8i + 12k + 8      (norms and softmax stay fp32 under autocast)
    + per-head q/k norms (Qwen3):  fp32 8q + 8k + 4(heads + kv heads); bf16 6q + 6k + 4(heads + kv heads)

a_rest = 16h + 8 head_dim + 28 bytes per token outside the layers (embedding output, the rotary cos and
sin every layer shares, final norm, the head's input).

Generator: its weights, and the key/value cache of every row it decodes at once:

    kv_cache = rows x (P + limit) x L x 2k x itemsize(compute dtype)

The transient terms are estimates (what the arithmetic allocates, not measured one by one); the
comparison with the H200's measured peaks is in docs/memory.md.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 2**30
LONGEST_SEARCHED = 128 * 1024  # past the context of every model in the table
BLOCK_SCORE_BYTES = 16  # per attention score element of one query block: scores, their fp32 softmax, gradients


@dataclass(frozen=True)
class ModelShape:
    """The widths that set a decoder-only transformer's memory. q = heads x head_dim, k = kv_heads x head_dim."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True
    qkv_bias: bool = False  # Qwen2's q/k/v projections carry biases
    qk_norm: bool = False  # Qwen3's per-head RMSNorm on queries and keys

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def k(self) -> int:
        return self.kv_heads * self.head_dim


def shape_of(config, name: str = "") -> ModelShape:
    """The ModelShape of a transformers config (Llama, Mistral, Qwen2, Qwen3 and their kind)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    model_type = getattr(config, "model_type", "")
    return ModelShape(name=name or model_type, hidden=config.hidden_size, intermediate=config.intermediate_size,
                      layers=config.num_hidden_layers, heads=heads,
                      kv_heads=getattr(config, "num_key_value_heads", None) or heads, head_dim=head_dim,
                      vocab=config.vocab_size, tied=bool(getattr(config, "tie_word_embeddings", False)),
                      qkv_bias=bool(getattr(config, "attention_bias", model_type == "qwen2")),
                      qk_norm=model_type.startswith("qwen3"))


def linear_parameters(shape: ModelShape) -> int:
    """Parameters of the decoder layers' Linear modules (the weights autocast casts), biases included."""
    attention = shape.hidden * (shape.q + 2 * shape.k) + shape.q * shape.hidden
    if shape.qkv_bias:
        attention += shape.q + 2 * shape.k
    return shape.layers * (attention + 3 * shape.hidden * shape.intermediate)


def parameter_count(shape: ModelShape) -> int:
    """All parameters: embeddings (and an untied head), the layers' Linear weights, the norms."""
    norms = shape.layers * (2 * shape.hidden + (2 * shape.head_dim if shape.qk_norm else 0)) + shape.hidden
    embeddings = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    return embeddings + linear_parameters(shape) + norms


def trainer_state_bytes(shape: ModelShape) -> int:
    """The trainer's fp32 weights, gradients and AdamW's two moments: 16 bytes a parameter."""
    return 16 * parameter_count(shape)


def layer_activation_bytes(shape: ModelShape, compute_dtype: str = "bfloat16") -> int:
    """Bytes autograd keeps per token and decoder layer for the backward (a_layer of the module docstring)."""
    h, q, i, k = shape.hidden, shape.q, shape.intermediate, shape.k
    if compute_dtype == "float32":
        total = 24 * h + 12 * q + 16 * i + 16 * k + 8
        if shape.qk_norm:
            total += 8 * q + 8 * k + 4 * (shape.heads + shape.kv_heads)
    else:
        total = 26 * h + 10 * q + 8 * i + 12 * k + 8
        if shape.qk_norm:
            total += 6 * q + 6 * k + 4 * (shape.heads + shape.kv_heads)
    return total


def rest_activation_bytes(shape: ModelShape) -> int:
    """Bytes autograd keeps per token outside the decoder layers (a_rest), the head's chunks aside."""
    return 16 * shape.hidden + 8 * shape.head_dim + 28


def activation_bytes_per_token(shape: ModelShape, compute_dtype: str = "bfloat16",
                               gradient_checkpointing: bool = False) -> int:
    """Bytes per trained token at the step's peak: every layer's activations, or with checkpointing each
    layer's fp32 input (4h bytes: the residual stream stays fp32 under autocast)."""
    if gradient_checkpointing:
        return shape.layers * 4 * shape.hidden + rest_activation_bytes(shape)
    return shape.layers * layer_activation_bytes(shape, compute_dtype) + rest_activation_bytes(shape)


def training_step_bytes(shape: ModelShape, response_tokens: int, *, prompt_tokens: int = 0, rows: int = 1,
                        compute_dtype: str = "bfloat16", gradient_checkpointing: bool = False) -> int:
    """Peak bytes of one native training step over `rows` rows of prompt + response tokens each."""
    from recipe.prefix_attention import TRAINING_QUERY_BLOCK
    from recipe.trainer import HEAD_CHUNK_BYTES

    tokens = rows * (prompt_tokens + response_tokens)
    block = min(response_tokens, TRAINING_QUERY_BLOCK or response_tokens)
    transient = (rows * shape.heads * block * (prompt_tokens + response_tokens) * BLOCK_SCORE_BYTES
                 + 3 * HEAD_CHUNK_BYTES)
    return (trainer_state_bytes(shape)
            + tokens * activation_bytes_per_token(shape, compute_dtype, gradient_checkpointing) + transient)


def kv_cache_bytes_per_token(shape: ModelShape, compute_dtype: str = "bfloat16") -> int:
    """The generator's keys and values of one token of one row, all layers."""
    return shape.layers * 2 * shape.k * (4 if compute_dtype == "float32" else 2)


def generator_weight_bytes(shape: ModelShape, compute_dtype: str = "bfloat16") -> int:
    """The PipelineRL generator's weights: the body's Linear weights in the compute dtype, the rest fp32
    (recipe.engines.pipeline_channel.hold_in_publish_dtypes)."""
    linear = linear_parameters(shape)
    return 4 * (parameter_count(shape) - linear) + (4 if compute_dtype == "float32" else 2) * linear


def longest_response(shape: ModelShape, device_bytes: int, *, prompt_tokens: int = 1024,
                     compute_dtype: str = "bfloat16", gradient_checkpointing: bool = False,
                     reserved_bytes: int = 0) -> int:
    """The longest response (a multiple of 1,024 tokens, at most LONGEST_SEARCHED) one row trains on within
    device_bytes - reserved_bytes; 0 when not even 1,024 fits."""
    budget = device_bytes - reserved_bytes
    low, high = 0, LONGEST_SEARCHED + 1024
    while high - low > 1024:  # training_step_bytes grows with the response: bisect on multiples of 1,024
        middle = (low + high) // 2 // 1024 * 1024
        fits = training_step_bytes(shape, middle, prompt_tokens=prompt_tokens, compute_dtype=compute_dtype,
                                   gradient_checkpointing=gradient_checkpointing) <= budget
        low, high = (middle, high) if fits else (low, middle)
    return low


# Shapes of public checkpoints (their config.json), for the README's table.
QWEN2P5_0P5B = ModelShape("Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 64, 151936, tied=True, qkv_bias=True)
QWEN2P5_1P5B = ModelShape("Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 128, 151936, tied=True, qkv_bias=True)
QWEN3_1P7B = ModelShape("Qwen3-1.7B", 2048, 6144, 28, 16, 8, 128, 151936, tied=True, qk_norm=True)
QWEN2P5_3B = ModelShape("Qwen2.5-3B", 2048, 11008, 36, 16, 2, 128, 151936, tied=True, qkv_bias=True)
QWEN3_4B = ModelShape("Qwen3-4B", 2560, 9728, 36, 32, 8, 128, 151936, tied=True, qk_norm=True)
QWEN2P5_7B = ModelShape("Qwen2.5-7B", 3584, 18944, 28, 28, 4, 128, 152064, tied=False, qkv_bias=True)
QWEN3_8B = ModelShape("Qwen3-8B", 4096, 12288, 36, 32, 8, 128, 151936, tied=False, qk_norm=True)
TABLE_SHAPES = (QWEN2P5_0P5B, QWEN2P5_1P5B, QWEN3_1P7B, QWEN2P5_3B, QWEN3_4B, QWEN2P5_7B, QWEN3_8B)


DEVICE_BYTES = 80 * GiB  # one 80 GB GPU (an H100 or A100 80GB)
RESERVED_BYTES = 8 * GiB  # left to the CUDA context and the caching allocator's fragmentation
PROMPT_TOKENS = 1024


def memory_table(device_bytes: int = DEVICE_BYTES, reserved_bytes: int = RESERVED_BYTES) -> str:
    """The README's table: per model shape, what one GPU of device_bytes holds for the native engine, bf16 body."""
    usable = device_bytes - reserved_bytes
    lines = ["| model | parameters | trainer state | longest response a step trains (1 row, 1k prompt) | "
             "with `optimizer.gradient_checkpointing` | generator beside it (PipelineRL, same GPU): weights, "
             "cache per 1k tokens a row |",
             "|---|---|---|---|---|---|"]
    for shape in TABLE_SHAPES:
        state = trainer_state_bytes(shape)
        longest = [longest_response(shape, device_bytes, prompt_tokens=PROMPT_TOKENS, gradient_checkpointing=ckpt,
                                    reserved_bytes=reserved_bytes) for ckpt in (False, True)]
        cells = ["does not fit: trl with `engine.sharding`" if not tokens else
                 f">= {tokens // 1024}k tokens" if tokens >= LONGEST_SEARCHED else f"{tokens // 1024}k tokens"
                 for tokens in longest]
        generator = (f"{generator_weight_bytes(shape) / GiB:.1f} GiB, "
                     f"{1024 * kv_cache_bytes_per_token(shape) / 2**20:.0f} MiB")
        lines.append(f"| {shape.name} | {parameter_count(shape) / 1e9:.2f} B | {state / GiB:.1f} GiB "
                     f"| {cells[0]} | {cells[1]} | {generator} |")
    lines.append(f"\n({usable // GiB} GiB usable of {device_bytes // GiB}; computed by "
                 "`recipe.memory.memory_table()`.)")
    return "\n".join(lines)
