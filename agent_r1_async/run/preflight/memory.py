"""Preflight: will the configured run fit in this machine's memory?

Before Ray starts, `memory_preflight` estimates the resident memory of every process of the
RL phase (the warm start and the held-out evaluations run before it, one at a time, and
need less) and compares the sum with the machine's available memory (`MemAvailable`).
When it does not fit, the launch refuses with the parts of the estimate and the keys that
shrink them (`--force` goes on with a warning). Joining a cluster (`--address`) skips the
check: the processes run on other machines.

The estimate, per process (bytes; P = parameters of `model.name_or_path`'s architecture):

    learner   (PROCESS + 16 P / world_size        fp32 weights, gradients, AdamW m and v
               + 2 P x engine dtype bytes         the published state dict and its frame
               + 2 P / world_size with bf16       bf16 copies of the weights (working copy or autocast's)
               + FRAG x (activations + head)) per rank
              activations = tokens x layers x (12 hidden + 3 intermediate) x 4
                            (x 0.5 with bf16; with gradient_checkpointing only each layer's
                            input is kept, layers x hidden x 4 x 2, halved with bf16 and
                            halved again on the bf16 working copy, whose residual stream is
                            bf16, plus one layer's full set)
              head        = action tokens x vocab x 12 (logits, log-softmax, their gradient;
                            fp32); action tokens = tokens x max_new_tokens x max_turns /
                            max_model_len (capped by head_chunk_tokens)
              tokens      = max(micro_batch_tokens, max_model_len): a micro-batch's padded
                            tokens; it holds at least one whole sequence, and the longest is
                            max_model_len (an episode packed into one: the prompt + max_turns
                            x (observation + action)); `launch` refuses a budget below it
    actor     vLLM: ENGINE + P x dtype bytes + KV cache (`engine.kv_cache_gb`, on CPU at
              least 1 GiB); transformers: PROCESS + P x dtype bytes
    buffer, driver, Ray's own processes: FIXED

The estimate is meant to stay at or above each process's peak resident memory: the constants
below are sized from measured peaks, and BENCHMARKS.md ("Learner at long sequences",
bench/bench_learner_long_sequences.py) measures a learner's peak against the sum of its
`learner_parts`, with its date and command.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from agent_r1_async import precision
from agent_r1_async.config import ConfigError, RunConfig

GB = 1e9
GIB = 1 << 30
PROCESS = 0.5 * GB
"""A Python process with torch and transformers imported and nothing loaded."""
ENGINE = 2.4 * GB
"""A vLLM CPU actor's three processes (the host with vLLM imported, vLLM's engine core and
its worker) apart from the weights and the KV cache."""
FIXED = 1.0 * GB
"""The buffer (0.06-0.35 GB RSS measured), the launch driver (~0.4 GB) and Ray's own
processes (GCS, raylet: ~0.3 GB) together."""
FRAG = 1.8
"""Allocator growth over micro-batches and updates (glibc keeps freed activation memory)."""
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelDims:
    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int

    @staticmethod
    def from_hf_config(c: dict) -> ModelDims:
        """Dimensions of a decoder-only HF config (Llama, Qwen2, Mistral, ...)."""
        c = c.get("text_config", c)
        h, i, n, v = (int(c["hidden_size"]), int(c["intermediate_size"]),
                      int(c["num_hidden_layers"]), int(c["vocab_size"]))
        heads = int(c.get("num_attention_heads", 1))
        kv = int(c.get("num_key_value_heads", heads))
        head_dim = int(c.get("head_dim") or h // heads)
        attn = h * head_dim * heads * 2 + h * head_dim * kv * 2  # q, o; k, v
        per_layer = attn + 3 * h * i + 2 * h
        embed = v * h * (1 if c.get("tie_word_embeddings", False) else 2)
        return ModelDims(n * per_layer + embed + h, n, h, i, v)


def longest_sequence(cfg: RunConfig) -> int:
    """Tokens of the longest sequence the learner may train: `model.max_model_len`.

    A step's context + action never exceeds it (the engine's token budget is the room the
    context leaves), and an episode packed into one sequence (`learner.pack_steps`: its last
    step's context + action) neither: with the `full` context builder the prompt and
    `env.max_turns` × (observation + action) reach it in a long episode, which then ends there.
    The prompt's and the observations' lengths are the env's, so nothing shorter bounds it."""
    return cfg.model.max_model_len


def micro_batch_tokens(cfg: RunConfig) -> int:
    """Padded tokens of the learner's largest micro-batch: `learner.micro_batch_tokens`, or the
    longest sequence where that is longer (a sequence is never split across micro-batches;
    `launch` refuses such a config, run/preflight/feasibility.py `sequences_fit_micro_batch`)."""
    return max(cfg.learner.micro_batch_tokens, longest_sequence(cfg))


def learner_parts(cfg: RunConfig, d: ModelDims) -> dict[str, float]:
    """Bytes of one learner rank, by part (module docstring)."""
    lc = cfg.learner
    tokens = micro_batch_tokens(cfg)
    trainable = 0 if lc.lora.enabled else d.params  # LoRA: the adapters are a rounding error
    per_token = d.layers * (12 * d.hidden + 3 * d.intermediate) * 4
    if lc.gradient_checkpointing:
        per_token = d.layers * d.hidden * 4 * 2 + (12 * d.hidden + 3 * d.intermediate) * 4
    bf16 = precision.learner_bf16(lc, model=cfg.model.name_or_path)
    if bf16:
        per_token //= 2
        if lc.gradient_checkpointing and precision.bf16_copy_allowed(lc):
            # On the bf16 working copy the residual stream, each layer's kept input, is bf16 too
            # (autocast keeps it fp32): 2 bytes a value instead of 4.
            per_token -= d.layers * d.hidden * 2
    # The head runs on action tokens only: at most the share of a context that actions fill.
    action_share = min(1.0, cfg.engine.max_new_tokens * cfg.env.max_turns / cfg.model.max_model_len)
    head_tokens = int(tokens * action_share)
    if lc.head_chunk_tokens:
        head_tokens = min(head_tokens, lc.head_chunk_tokens)
    published = _DTYPE_BYTES[precision.engine_dtype(cfg.engine, model=cfg.model.name_or_path)]
    parts = {
        "process": PROCESS,
        "weights + gradients + AdamW": (4 * d.params + 12 * trainable) / lc.world_size,
        "published copy": 2 * published * d.params,
        "activations": FRAG * tokens * per_token,
        "LM head": FRAG * head_tokens * d.vocab * 12,
    }
    if bf16:  # the bf16 working copy (learner/bf16_copy.py), or autocast's casts of the weights
        parts["bf16 weight copies"] = 2 * d.params / lc.world_size
    return parts


def actor_bytes(cfg: RunConfig, d: ModelDims) -> float:
    weights = d.params * _DTYPE_BYTES[precision.engine_dtype(cfg.engine, model=cfg.model.name_or_path)]
    if cfg.engine.backend == "vllm":
        return ENGINE + weights + max(1, round(cfg.engine.kv_cache_gb)) * 2**30
    return PROCESS + weights


def estimate(cfg: RunConfig, d: ModelDims) -> dict[str, float]:
    """Bytes the RL phase needs, by process group."""
    learner = sum(learner_parts(cfg, d).values())
    return {
        f"learner ({cfg.learner.world_size} rank{'s' * (cfg.learner.world_size > 1)})":
            learner * cfg.learner.world_size,
        f"actors ({cfg.actors.num_actors})": actor_bytes(cfg, d) * cfg.actors.num_actors,
        "buffer, driver, Ray": FIXED,
    }


def available_bytes() -> float:
    """MemAvailable from /proc/meminfo (what can be allocated without swapping)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    raise OSError("no MemAvailable in /proc/meminfo")


def check(cfg: RunConfig, d: ModelDims, available: float) -> str | None:
    """Why the run cannot fit in `available` bytes (naming the keys to change), or None."""
    parts = estimate(cfg, d)
    need = sum(parts.values())
    if need <= available:
        return None
    lp = learner_parts(cfg, d)
    lines = ", ".join(f"{k} {v / GB:.1f} GB" for k, v in parts.items())
    fixes = []
    if lp["activations"] + lp["LM head"] > 0.25 * need / cfg.learner.world_size:
        fixes.append(_shrink_activations(cfg, lp["activations"] + lp["LM head"]))
        if not cfg.learner.gradient_checkpointing:
            fixes.append("set `learner.gradient_checkpointing: true`")
    if cfg.actors.num_actors > 1:
        fixes.append(f"lower `actors.num_actors` ({cfg.actors.num_actors})")
    if cfg.engine.backend == "vllm" and cfg.engine.kv_cache_gb > 1:  # 1 GiB: the CPU minimum
        fixes.append(f"lower `engine.kv_cache_gb` ({cfg.engine.kv_cache_gb:g})")
    fixes.append("use a smaller `model.name_or_path`")
    return (f"the run needs about {need / GB:.1f} GB of memory ({lines}) but this machine has "
            f"{available / GB:.1f} GB available: " + "; ".join(fixes)
            + " (or `launch --force` to start anyway)")


def _shrink_activations(cfg: RunConfig, active: float) -> str:
    """The keys that shrink a micro-batch's activations: its token budget, down to the longest
    sequence (a micro-batch holds one whole), then that sequence's bound itself."""
    lc, longest = cfg.learner, longest_sequence(cfg)
    what = f"activations {active / GB:.1f} GB per rank"
    if lc.micro_batch_tokens > longest:
        return (f"lower `learner.micro_batch_tokens` ({lc.micro_batch_tokens}: {what}; not below "
                f"`model.max_model_len` {longest}, the longest sequence)")
    return (f"lower `model.max_model_len` ({longest}, the longest sequence, which a micro-batch "
            f"holds whole: {what}) and `learner.micro_batch_tokens` "
            f"({lc.micro_batch_tokens}) with it; episodes then end sooner (fewer `env.max_turns`, "
            "or `context.builder: truncate` with `context.max_tokens` + "
            "`engine.max_new_tokens` within it keep them whole)")


def model_dims(name_or_path: str) -> ModelDims | None:
    """The architecture's dimensions from its config.json (preparing a known alias once, in a
    child process, as its first use would); None for a hub id that is not on disk."""
    from agent_r1_async.models import KNOWN_MODELS, TINY_MODEL_ALIAS, cache_dir, resolve_model

    if name_or_path in KNOWN_MODELS or name_or_path == TINY_MODEL_ALIAS:
        name = name_or_path if name_or_path in KNOWN_MODELS else f"{TINY_MODEL_ALIAS}-s0"
        path = cache_dir() / "models" / name
        if not (path / ".complete").exists():
            from agent_r1_async.run.processes.child import in_subprocess

            path = Path(in_subprocess(resolve_model, name_or_path))
    else:
        path = Path(resolve_model(name_or_path))
    config = path / "config.json"
    if not config.is_file():
        return None
    return ModelDims.from_hf_config(json.loads(config.read_text()))


def memory_preflight(cfg: RunConfig, force: bool = False, joined: bool = False) -> None:
    """Refuse (ConfigError) a local run that cannot fit in memory; warn and go on with
    `force`. Skipped when joining a cluster (`joined`) or for a model not on disk."""
    if joined:
        return
    dims = model_dims(cfg.model.name_or_path)
    if dims is None:
        return
    why = check(cfg, dims, available_bytes())
    if why is None:
        return
    if not force:
        raise ConfigError(why)
    print(f"[launch] warning (--force): {why}", file=sys.stderr, flush=True)


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def buffer_fits_memory(cfg: RunConfig) -> None:
    """`buffer.max_bytes` within this machine's physical memory (a local run)."""
    total = _physical_memory()
    if cfg.buffer.max_bytes <= total:
        return
    raise ConfigError(
        f"buffer.max_bytes: ({cfg.buffer.max_bytes}) is more than this machine's memory "
        f"({total / GIB:.3g} GiB): the buffer would be killed before its bound stops it")
