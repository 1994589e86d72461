"""Typed run configuration: msgspec Structs, loaded from YAML, validated once at load.

- Unknown keys are errors (`forbid_unknown_fields=True`); wrong types are errors. Both name the
  full key path (`buffer.max_stalenes`) and what was expected.
- Cross-field rules live in `__post_init__` (per section) or `RunConfig.__post_init__`
  (between sections); each message names the key and says why.
- Every field has a docstring (the string right below it) of a line or two, at most 400
  characters: what, unit, default, why. Measurements belong in BENCHMARKS.md.
- CLI overrides: `--set a.b.c=value`, where value is parsed as YAML (`--set buffer.alpha=0.6`).

Load with `load_config(path, overrides)`; every file in `configs/` is parsed by a test.

Why one module over ~400 lines: it is the run's whole schema, one documented field a line;
splitting the sections across files would scatter what a user reads to write a config, and
the sections share the loading and error-naming code below.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

import msgspec
import msgspec.inspect
import yaml


class ConfigError(ValueError):
    """A config that cannot be used; the message names the key path and what was expected."""


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base for config sections."""


def _require(cond: bool, key: str, why: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {why}")


SEED_LIMIT = 1 << 32
"""Seeds are in [0, 2**32): the range torch, vLLM, numpy and `random` all take."""
MAX_ACTORS = 1024
"""One buffer process serves every actor (records, credits, stats): more needs a sharded
buffer, which this design does not have."""
MAX_BUFFER_BYTES = 1 << 40
"""1 TiB: a bound one buffer process's memory can actually reach (a larger one would bound
nothing: the OS kills the process first); `launch` checks a local run against its machine."""
MAX_FAILED_SAMPLE = 8
"""Failed episodes the buffer keeps for the learner's episode samples (the newest), and the
most one sample asks for (`logging.episodes_failed`)."""


def _require_seed(seed: int, key: str, count: int = 1) -> None:
    """`count` consecutive seeds from `seed` (actor i uses actors.seed + i) must fit."""
    last = f"{key} + actors.num_actors - 1 = {seed + count - 1}" if count > 1 else f"({seed})"
    _require(seed >= 0 and seed + count <= SEED_LIMIT, key,
             f"{last} must be in [0, 2**32): torch, vLLM and numpy take 32-bit seeds")


RAY_BUILTIN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
"""Resources with keys of their own (`num_cpus`, `num_gpus`): a role's `resources` holds only
custom ones."""


def _require_resources(resources: dict[str, float], key: str) -> None:
    """A role's custom Ray resources: names a node advertises (`ray start --resources`) and
    positive amounts."""
    for name, amount in resources.items():
        _require(bool(name) and name not in RAY_BUILTIN_RESOURCES, key,
                 f"{name!r} is not a custom resource name (CPU and GPU have num_cpus and "
                 "num_gpus)")
        _require(isinstance(amount, int | float) and amount > 0, key,
                 f"{name}: {amount!r} must be a positive amount")


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------


class ModelConfig(_Section):
    name_or_path: str = "smollm2-135m-instruct"
    """A known model alias (`agent-r1-async prepare-model --list`), a local HF directory or a hub id."""
    init_from: str = ""
    """Checkpoint directory to start from (e.g. an `sft` run's `RUN_DIR/checkpoints/latest`)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Learner parameter dtype (bf16 autocast is `learner.bf16`)."""
    max_model_len: int = 2048
    """Longest context + action the engines and the learner accept, in tokens."""

    def __post_init__(self) -> None:
        _require(self.max_model_len >= 64, "model.max_model_len", "must be at least 64 tokens")
        _require(bool(self.name_or_path.strip()), "model.name_or_path", "must name a model")

    @property
    def start_from(self) -> str:
        """Where the version-0 weights come from: `init_from` if set, else `name_or_path`."""
        return self.init_from or self.name_or_path


class EngineConfig(_Section):
    backend: Literal["vllm", "hf"] = "vllm"
    """Actor inference engine: vLLM (async engine, continuous batching) or transformers."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Engine weights/activations dtype; auto: bfloat16 on CUDA with bf16 support, and on a CPU
    where a cached micro-benchmark of the engine's own linear op finds bf16 at least 1.1x as fast
    as fp32, else float32 (precision.py)."""
    max_new_tokens: int = 256
    """Token budget of one action (one assistant turn)."""
    temperature: float = 1.0
    """Sampling temperature; the learner's log-probs use it too (agent_r1_async/sampling.py)."""
    top_p: float = 1.0
    """Nucleus sampling (1 = off); the learner's log-probs apply the same top-p mask."""
    stop: list[str] = []
    """Extra stop strings (the tokenizer's eos always stops)."""
    max_concurrent_requests: int = 64
    """Generation requests an engine serves at once (continuous batching width)."""
    enforce_eager: bool = True
    """vLLM: skip graph compilation (much faster start on CPU)."""
    kv_cache_gb: float = 2.0
    """vLLM CPU: KV-cache size in GiB (VLLM_CPU_KVCACHE_SPACE)."""
    gpu_memory_utilization: float = 0.5
    """vLLM GPU: fraction of the GPU the engine may take."""
    abort_on_update: bool = False
    """Abort in-flight requests when new weights arrive and resume them under the new version."""
    ipc_busy_wait_s: float | None = None
    """vLLM: seconds its engine core and worker spin (instead of sleeping) waiting for each
    other's next message; unset: vLLM's own 1 s. 0 frees the core the engine core spins on
    while it generates (on a CPU: the learner's), at a wake-up per step (actors/engines/vllm_wait.py)."""
    cpu_reserved_cores: int | None = None
    """vLLM on a CPU: cores kept off its worker's OpenMP threads (VLLM_CPU_NUM_OF_RESERVED_CPU);
    unset: vLLM's own choice (one, for its engine core and whatever runs beside the worker). 0
    gives the worker every core: for an evaluation that runs alone, with `ipc_busy_wait_s: 0` so
    that the engine core sleeps while the worker computes (BENCHMARKS, "vLLM's busy-wait")."""

    def __post_init__(self) -> None:
        _require(self.max_new_tokens >= 1, "engine.max_new_tokens", "must be >= 1")
        _require(self.temperature > 0, "engine.temperature", "must be > 0 (sampling is required)")
        _require(0 < self.top_p <= 1, "engine.top_p", "must be in (0, 1]")
        _require(self.max_concurrent_requests >= 1, "engine.max_concurrent_requests", "must be >= 1")
        _require(self.kv_cache_gb > 0, "engine.kv_cache_gb", "must be > 0")
        _require(self.ipc_busy_wait_s is None or 0 <= self.ipc_busy_wait_s <= 60,
                 "engine.ipc_busy_wait_s", "must be unset (vLLM's own 1 s) or seconds in [0, 60]")
        _require(self.cpu_reserved_cores is None or self.cpu_reserved_cores >= 0,
                 "engine.cpu_reserved_cores", "must be unset (vLLM's own choice) or a count >= 0")
        _require(
            0 < self.gpu_memory_utilization <= 1, "engine.gpu_memory_utilization", "must be in (0, 1]"
        )


SUMMARY_PROMPT = (
    "Your context is nearly full. Write a summary of the episode so far that will replace "
    "the history: what the task asks, what you have done and learned, where things stand "
    "now, and what remains to do. Write only the summary, in a few sentences, without a "
    "tool call."
)
"""The default compaction request (`context.summary_prompt`)."""


class ContextConfig(_Section):
    builder: Literal["full", "last_k", "truncate", "compact"] = "full"
    """How a step's context is built from the history: all of it, the last k turns, a token budget (newest turns kept), or a token budget the agent keeps by summarizing the history itself (compact: the summary is a trained step)."""
    last_k: int = 4
    """Turns kept by `last_k` (the instruction is always kept)."""
    max_tokens: int = 1536
    """Token budget: `truncate` keeps the newest turns within it (oldest dropped first, the instruction kept); `compact` asks the agent for a summary when the next context would exceed it."""
    truncate_to: int = 0
    """`truncate`: a cut drops the oldest turns until the context fits this many tokens; later steps keep that first turn until `max_tokens` is exceeded again, so contexts between cuts extend one another (prefix cache, delta records, step packing apply). 0 = `max_tokens`: a cut at every step."""
    summary_max_tokens: int = 256
    """`compact`: the most tokens a summary may have (the engine's budget for the summary step)."""
    summary_prompt: str = SUMMARY_PROMPT
    """`compact`: the request for a summary, a user message after the history; the summary answers it, and later contexts show the summary without it."""

    def __post_init__(self) -> None:
        _require(self.last_k >= 1, "context.last_k", "must be >= 1")
        _require(self.max_tokens >= 16, "context.max_tokens", "must be >= 16")
        _require(0 <= self.truncate_to <= self.max_tokens, "context.truncate_to",
                 f"must be between 0 (= context.max_tokens) and context.max_tokens ({self.max_tokens})")
        _require(self.summary_max_tokens >= 1, "context.summary_max_tokens", "must be >= 1")
        _require(bool(self.summary_prompt.strip()), "context.summary_prompt",
                 "must not be empty (it asks the agent for its summary)")
        _require(
            self.builder != "compact" or self.summary_max_tokens < self.max_tokens,
            "context.summary_max_tokens",
            f"({self.summary_max_tokens}) must be below context.max_tokens ({self.max_tokens}): "
            "the context after a summary holds it and must be within the budget",
        )


class EnvConfig(_Section):
    name: str = "multihop_qa"
    """Registered env name (`agent-r1-async envs list`) or `package.module:Class`."""
    max_turns: int = 4
    """Steps (assistant turns) before an episode is truncated."""
    tool_timeout_s: float = 10.0
    """A tool call that takes longer fails that call (the episode goes on)."""
    step_timeout_s: float = 60.0
    """An env step that takes longer ends the episode with status "timeout"."""
    train_split: str = "train"
    """Dataset split actors draw tasks from."""
    eval_split: str = "dev"
    """Held-out split for evaluation."""
    args: dict[str, Any] = {}
    """Env-specific settings, validated by the env's own config struct."""
    import_: list[str] = msgspec.field(default_factory=list, name="import")
    """Modules every process imports before resolving `env.name` (so `@register_env` names in them resolve)."""

    def __post_init__(self) -> None:
        _require(self.max_turns >= 1, "env.max_turns", "must be >= 1")
        _require(self.tool_timeout_s > 0, "env.tool_timeout_s", "must be > 0")
        _require(self.step_timeout_s > 0, "env.step_timeout_s", "must be > 0")
        _require(
            self.tool_timeout_s <= self.step_timeout_s,
            "env.tool_timeout_s",
            f"({self.tool_timeout_s:g} s) cannot exceed env.step_timeout_s "
            f"({self.step_timeout_s:g} s): the step would time out before its tool does",
        )


class ActorsConfig(_Section):
    num_actors: int = 1
    """Actor processes (each with its own engine); at most 1024 (one buffer serves them all)."""
    groups_in_flight: int = 2
    """Groups one actor runs concurrently (each group is `algorithm.group_size` episodes)."""
    num_cpus: float = 1.0
    """CPUs Ray reserves for each actor."""
    num_gpus: float = 0.0
    """GPUs Ray reserves for each actor."""
    resources: dict[str, float] = {}
    """Custom Ray resources each actor asks for, e.g. {"actor": 1}: actors go only to nodes that advertise them (`ray start --resources '{"actor": 2}'`), spread over those nodes, and a restarted actor goes to any of them (README "Clusters")."""
    stats_interval_s: float = 5.0
    """How often an actor sends an ActorStats message."""
    max_restarts: int = 3
    """Times Ray restarts a dead actor before the launch fails."""
    seed: int = 0
    """Base seed; actor i uses seed + i for task order and sampling (all in [0, 2**32)). Unset: `launch.seed`."""
    delta_records: bool = True
    """A step whose context extends the previous step's context + action is sent as the appended tokens only, so an episode's records grow linearly with its length, not with its square (docs/architecture.md, "Delta step records"); false: every record carries its whole context."""

    def __post_init__(self) -> None:
        _require(self.num_actors >= 1, "actors.num_actors", "must be >= 1")
        _require(self.num_actors <= MAX_ACTORS, "actors.num_actors",
                 f"({self.num_actors}) must be at most {MAX_ACTORS}: one buffer process serves "
                 "every actor")
        _require_seed(self.seed, "actors.seed", self.num_actors)
        _require(self.groups_in_flight >= 1, "actors.groups_in_flight", "must be >= 1")
        _require(self.num_cpus >= 0, "actors.num_cpus", "must be >= 0")
        _require(self.stats_interval_s > 0, "actors.stats_interval_s", "must be > 0")
        _require(self.num_gpus >= 0, "actors.num_gpus", "must be >= 0")
        _require(self.max_restarts >= 0, "actors.max_restarts", "must be >= 0")
        _require_resources(self.resources, "actors.resources")


class BufferConfig(_Section):
    max_staleness: int = 2
    """Largest allowed learner_version − the group version `staleness_from` reads; older groups
    are dropped untrained."""
    staleness_from: Literal["newest_token", "oldest_token"] = "newest_token"
    """A group's version for the bound: its newest action token's (about when it completed;
    older tokens of long episodes are importance-corrected) or its oldest (strict)."""
    sampling: Literal["prioritized", "fifo"] = "prioritized"
    """Group sampling: sum-tree by priority, or oldest first."""
    alpha: float = 0.6
    """Priority exponent: P(i) ∝ p_i^α (0 = uniform)."""
    beta: float = 0.4
    """Importance-weight exponent: w_i = (N·P(i))^-β / max w."""
    freshness_decay: float = 0.5
    """Priority multiplier per version of staleness (fresher groups are preferred)."""
    priority_eps: float = 0.01
    """Priority floor so groups with equal rewards can still be drawn."""
    min_groups_to_sample: int = 1
    """Groups that must be ready before the first sample."""
    samples_per_insert: float = 1.0
    """Target times each group is sampled, on average (Reverb's samples-per-insert)."""
    spi_tolerance: float = 16.0
    """Allowed deviation from samples_per_insert, in groups, before sampling or inserts wait
    (keep it ≥ (max_staleness + 1) × batch_groups, or it, not staleness, limits how far
    actors run ahead)."""
    max_reuse: int = 1
    """Most times one group may be sampled before it is evicted."""
    max_bytes: int = 1_073_741_824
    """Memory bound of stored episodes; when reached, no new credits are granted (1 MiB to 1 TiB; `launch` also checks it against this machine's memory and the batch's worst case)."""
    group_wait_s: float | None = None
    """Seconds from a group's first record after which it closes with `min_group_episodes`
    ended episodes, dropping the rest; None: wait while its episodes still send records."""
    min_group_episodes: int = 2
    """Fewest ended episodes of a group that may be sampled after `group_wait_s`."""
    episode_timeout_s: float = 600.0
    """An episode with no new record for this long expires (its actor is presumed dead)."""
    snapshot_interval_s: float = 60.0
    """How often the buffer snapshots its accepted episodes to disk (0 = only at shutdown and
    on learner checkpoints)."""
    max_restarts: int = 3
    """`launch`: times a buffer process that died is restarted from its latest snapshot."""
    resources: dict[str, float] = {}
    """Custom Ray resources the buffer process asks for, e.g. {"buffer": 1}: it goes only to a node that advertises them. A buffer whose node is lost restarts on another such node from its latest snapshot (README "Clusters")."""
    max_frame_bytes: int = 67_108_864
    """Largest accepted frame; larger ones are rejected by the socket (64 KiB to buffer.max_bytes)."""
    step_grace_s: float = 5.0
    """After an EpisodeEnd, how long to wait for its missing steps before dropping the episode."""
    seed: int = 0
    """Seed of the buffer's sampling RNG (in [0, 2**32)). Unset: `launch.seed`."""
    gc_freeze: bool = True
    """Move stored records out of the cyclic GC's scans (gc.freeze: faster ingest); off if the process relies on cycle collection."""

    def __post_init__(self) -> None:
        _require(self.max_staleness >= 0, "buffer.max_staleness", "must be >= 0")
        _require(0 <= self.alpha <= 1, "buffer.alpha", "must be in [0, 1]")
        _require(0 <= self.beta <= 1, "buffer.beta", "must be in [0, 1]")
        _require(0 < self.freshness_decay <= 1, "buffer.freshness_decay", "must be in (0, 1]")
        _require(self.priority_eps > 0, "buffer.priority_eps", "must be > 0")
        _require(self.min_groups_to_sample >= 1, "buffer.min_groups_to_sample", "must be >= 1")
        _require(self.samples_per_insert > 0, "buffer.samples_per_insert", "must be > 0")
        _require(self.spi_tolerance >= 0, "buffer.spi_tolerance", "must be >= 0")
        _require(self.max_reuse >= 1, "buffer.max_reuse", "must be >= 1")
        _require(self.max_bytes >= 1 << 20, "buffer.max_bytes", "must be at least 1 MiB")
        _require(self.min_group_episodes >= 1, "buffer.min_group_episodes", "must be >= 1")
        _require(self.episode_timeout_s > 0, "buffer.episode_timeout_s", "must be > 0")
        _require(self.step_grace_s >= 0, "buffer.step_grace_s", "must be >= 0")
        _require(self.group_wait_s is None or self.group_wait_s > 0, "buffer.group_wait_s",
                 "must be > 0, or null to wait for every episode that still sends records")
        _require(self.snapshot_interval_s >= 0, "buffer.snapshot_interval_s", "must be >= 0 (0 = at shutdown only)")
        _require(self.max_restarts >= 0, "buffer.max_restarts", "must be >= 0")
        _require_resources(self.resources, "buffer.resources")
        _require(
            self.max_frame_bytes >= 1 << 16,
            "buffer.max_frame_bytes",
            "must be at least 64 KiB (smaller frames would refuse ordinary step records)",
        )
        _require(self.max_bytes <= MAX_BUFFER_BYTES, "buffer.max_bytes",
                 f"({self.max_bytes}) must be at most 1 TiB ({MAX_BUFFER_BYTES})")
        _require(self.max_frame_bytes <= self.max_bytes, "buffer.max_frame_bytes",
                 f"({self.max_frame_bytes}) cannot exceed buffer.max_bytes ({self.max_bytes}): "
                 "the buffer could not hold such a frame")
        _require_seed(self.seed, "buffer.seed")


class AlgorithmConfig(_Section):
    name: Literal["grpo", "ppo", "reinforce_pp", "rloo"] = "grpo"
    """Advantage estimator: group-normalized, step-level GAE with a value head, batch-normalized, leave-one-out."""
    group_size: int = 4
    """Episodes per task (G); group baselines are computed over them."""
    batch_groups: int = 4
    """Groups per learner update (batch = batch_groups × group_size episodes)."""
    credit: Literal["step", "token"] = "step"
    """step: step t's return-to-go against the same step index in the group (learner/advantages.py); token: one episode advantage on all steps."""
    gamma: float = 1.0
    """Discount over steps for returns G_t = Σ γ^(k-t) r_k."""
    lam: float = 0.95
    """GAE λ (ppo only)."""
    std_normalize: bool = True
    """Divide group (GRPO) or batch (REINFORCE++) advantages by their std."""
    eps_low: float = 0.2
    """PPO ratio clip below: r ≥ 1 - eps_low."""
    eps_high: float = 0.28
    """PPO ratio clip above: r ≤ 1 + eps_high (clip-higher)."""
    c_max: float = 5.0
    """Truncation of the importance weight w = min(exp(proximal - behavior), c_max)."""
    is_mask_low: float = 0.0
    """Tokens whose importance weight is below this are masked (0 = off)."""
    is_mask_high: float = 0.0
    """Tokens whose importance weight is above this are masked (0 = off)."""
    kl_coef: float = 0.0
    """Coefficient of the KL penalty to the reference (initial) policy (0 = no reference model)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    value_coef: float = 0.5
    """Value loss coefficient (ppo only)."""
    loss_agg: Literal["token-mean", "seq-mean-token-sum"] = "token-mean"
    """How per-token losses are aggregated over the batch."""
    value_clip: float = 0.2
    """PPO value-loss clip around the proximal value V_old (0 = no clipping; ppo only)."""
    filter_groups: bool = False
    """Drop a completed group whose GRPO / RLOO advantages are all zero (equal returns, e.g.
    every episode correct) at the buffer instead of training on it, and let an actor start
    another in its place (DAPO's dynamic sampling; buffers/zero_advantage.py). grpo and rloo
    only."""

    def __post_init__(self) -> None:
        _require(self.group_size >= 1, "algorithm.group_size", "must be >= 1")
        _require(self.batch_groups >= 1, "algorithm.batch_groups", "must be >= 1")
        _require(0 < self.gamma <= 1, "algorithm.gamma", "must be in (0, 1]")
        _require(0 <= self.lam <= 1, "algorithm.lam", "must be in [0, 1]")
        _require(0 <= self.eps_low < 1, "algorithm.eps_low", "must be in [0, 1)")
        _require(self.eps_high >= 0, "algorithm.eps_high", "must be >= 0")
        _require(self.c_max >= 1, "algorithm.c_max", "must be >= 1 (it truncates weights above it)")
        _require(self.value_clip >= 0, "algorithm.value_clip", "must be >= 0 (0 = off)")
        _require(
            self.is_mask_high == 0 or self.is_mask_high > self.is_mask_low,
            "algorithm.is_mask_high",
            "must be 0 (off) or greater than algorithm.is_mask_low",
        )
        _require(
            not self.filter_groups or self.name in ("grpo", "rloo"),
            "algorithm.filter_groups",
            f"needs a group baseline (grpo or rloo): {self.name}'s advantages are not zero "
            "when a group's returns are equal",
        )
        _require(
            self.name not in ("grpo", "rloo") or self.group_size >= 2,
            "algorithm.group_size",
            f"{self.name} needs at least 2 episodes per group for its baseline",
        )


class LoraConfig(_Section):
    enabled: bool = False
    """Train LoRA adapters through peft instead of all weights (published merged)."""
    rank: int = 16
    """LoRA rank r."""
    alpha: float = 32.0
    """LoRA scaling alpha."""
    target_modules: list[str] = msgspec.field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Module names that get adapters."""

    def __post_init__(self) -> None:
        _require(self.rank >= 1, "learner.lora.rank", "must be >= 1")
        _require(self.alpha > 0, "learner.lora.alpha", "must be > 0")
        _require(bool(self.target_modules), "learner.lora.target_modules", "must name at least one module")


class LearnerConfig(_Section):
    lr: float = 1e-6
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: list[float] = msgspec.field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas, each in [0, 1)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (0 = off)."""
    micro_batch_tokens: int = 4096
    """Token budget of one micro-batch (length-sorted, padded); gradients accumulate over them."""
    ppo_epochs: int = 1
    """Optimizer passes over each sampled batch."""
    pack_steps: bool = True
    """Train an episode's steps as one sequence when each context extends the last (the `full`
    builder): same loss, gradient and V(s_t), one forward per episode (learner/batching.py)."""
    shared_prefix: bool = True
    """Train a group's sequences as one row with a tree attention mask, so their common prefix
    (the prompt) is computed once: same loss and gradient (learner/prefix_tree.py)."""
    skip_zero_advantage: bool = True
    """Leave steps of advantage exactly 0 out of the forward and backward, their tokens kept in
    the loss's denominator: the same gradient for less compute. Only where their gradient is
    exactly 0: not under PPO, `algorithm.kl_coef` or `algorithm.entropy_coef` (learner/loop.py)."""
    total_updates: int = 100
    """Updates (optimizer steps over a batch) before the run ends."""
    publish_every: int = 1
    """Publish weights to the actors every N updates."""
    checkpoint_every: int = 50
    """Checkpoint every N updates (and at the end)."""
    keep_checkpoints: int = 3
    """Keep the newest N complete checkpoints of the run, removing older ones after each new
    one is in place (never the one `checkpoints/latest` names); 0 = keep all."""
    bf16: bool | Literal["auto"] = "auto"
    """bf16 autocast for forward/backward (fp32 master weights and AdamW state); auto: on where
    `learner.device` runs bf16 matmuls faster, decided as for `engine.dtype` (precision.py)."""
    bf16_copy: bool = True
    """With bf16, one learner process and no LoRA: forward and backward run on a bf16 copy of the
    weights, refreshed after each optimizer step, whose gradients accumulate into the fp32 master
    weights (learner/bf16_copy.py). false: plain autocast over the fp32 weights."""
    compile: bool = False
    """torch.compile (inductor, dynamic shapes) each decoder layer the learner trains: fused
    elementwise kernels. The first update compiles (cached on disk); on a CPU inductor needs a C++
    compiler (g++, c++, clang++ or $CXX). One learner process without LoRA."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward (non-reentrant
    torch.utils.checkpoint; FSDP2 needs that variant): a micro-batch keeps one layer's
    activations instead of all layers', for one more forward of compute."""
    checkpoint_recompute: Literal["all", "pointwise"] = "all"
    """With `gradient_checkpointing`, what a layer recomputes in backward: all (it keeps only its
    input) or pointwise (the elementwise ops only; matmul and attention outputs are kept: more
    memory, less compute). learner/memory_savers.py."""
    allocator: Literal["glibc", "jemalloc"] = "glibc"
    """malloc of the learner processes `launch` starts: glibc, or jemalloc (the libjemalloc.so Ray
    ships, preloaded, purging off: a lower peak RSS, BENCHMARKS.md "Learner memory"). Launched
    learners only, not tests or benchmarks (learner/memory_savers.py)."""
    malloc_mmap_threshold_kb: int = 0
    """glibc malloc: allocations of at least this many KiB get their own mapping, returned when freed
    (0 = glibc's default, which grows to 32 MiB); 1024 keeps the peak RSS at the live set for more
    page faults (learner/memory_savers.py). Process-wide; no effect off glibc."""
    head_chunk_tokens: int = 0
    """LM head + (temperature/top-p) log-softmax over at most this many action tokens at a
    time, each chunk recomputed in backward, so the [action tokens × vocab] fp32 logits of a
    micro-batch never exist at once (0 = one piece, all kept for backward)."""
    flash_attention: bool = True
    """Use flash-attention 2 when installed and on GPU."""
    device: str = "auto"
    """torch device: auto (cuda if available), cpu, cuda, cuda:N (N below the GPUs Ray gives the learner, ceil(learner.num_gpus); `launch` checks a local run's CUDA devices)."""
    num_cpus: float = 1.0
    """CPUs Ray reserves for the learner."""
    num_gpus: float = 0.0
    """GPUs Ray reserves for the learner."""
    resources: dict[str, float] = {}
    """Custom Ray resources each learner rank's placement bundle asks for, e.g. {"learner": 1}: the ranks go only to nodes that advertise them; a group whose node is lost restarts on such a node from the last checkpoint (README "Clusters")."""
    sample_timeout_s: float = 600.0
    """How long the learner waits for a batch before giving up."""
    republish_s: float = 10.0
    """While waiting for data, re-publish the current weights this often (late-joining actors)."""
    seed: int = 0
    """torch seed (in [0, 2**32)). Unset: `launch.seed`."""
    lora: LoraConfig = msgspec.field(default_factory=LoraConfig)
    """LoRA settings."""
    world_size: int = 1
    """Learner processes (ranks). 1: one process (no torch.distributed); N > 1: N ranks train one model
    sharded with FSDP2 (torch.distributed), each on its share of the batch's tokens."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend of the learner ranks; auto: nccl on CUDA, gloo on CPU."""
    max_restarts: int = 3
    """`launch`: times a learner group whose rank died is rebuilt from its last checkpoint."""
    cpu_offload: bool = False
    """FSDP2 CPU offload of the sharded parameters, gradients and optimizer state (GPU runs
    that do not fit; the optimizer step then runs on the CPU)."""

    def __post_init__(self) -> None:
        _require(self.world_size >= 1, "learner.world_size", "must be >= 1")
        _require(self.max_restarts >= 0, "learner.max_restarts", "must be >= 0")
        _require(not (self.cpu_offload and self.device == "cpu"), "learner.cpu_offload",
                 "offloads GPU memory to the CPU; learner.device is cpu")
        _require(not (self.backend == "nccl" and self.device == "cpu"), "learner.backend",
                 "nccl needs CUDA devices; learner.device is cpu (use gloo or auto)")
        _require(not (self.world_size > 1 and self.lora.enabled), "learner.world_size",
                 "LoRA (learner.lora.enabled) trains with one learner process only; set 1")
        _require(not (self.compile and (self.world_size > 1 or self.lora.enabled)),
                 "learner.compile", "compiles one learner process without LoRA; "
                 f"learner.world_size is {self.world_size}, learner.lora.enabled "
                 f"{self.lora.enabled}")
        _require(self.lr > 0, "learner.lr", "must be > 0")
        _require(len(self.betas) == 2, "learner.betas", "must be two numbers [beta1, beta2]")
        _require(all(0 <= b < 1 for b in self.betas), "learner.betas",
                 f"{self.betas} must each be in [0, 1) (AdamW's moving-average decays)")
        _require_seed(self.seed, "learner.seed")
        _require(self.grad_clip >= 0, "learner.grad_clip", "must be >= 0")
        _require(self.micro_batch_tokens >= 64, "learner.micro_batch_tokens", "must be >= 64")
        _require(self.head_chunk_tokens >= 0, "learner.head_chunk_tokens", "must be >= 0")
        _require(0 <= self.malloc_mmap_threshold_kb <= 32 * 1024,
                 "learner.malloc_mmap_threshold_kb", "must be in [0, 32768] (glibc's maximum)")
        _require(self.ppo_epochs >= 1, "learner.ppo_epochs", "must be >= 1")
        _require(self.total_updates >= 1, "learner.total_updates", "must be >= 1")
        _require(self.publish_every >= 1, "learner.publish_every", "must be >= 1")
        _require(self.checkpoint_every >= 1, "learner.checkpoint_every", "must be >= 1")
        _require(self.keep_checkpoints >= 0, "learner.keep_checkpoints", "must be >= 0 (0 = keep all)")
        _require(self.republish_s > 0, "learner.republish_s", "must be > 0")
        _require(self.sample_timeout_s > 0, "learner.sample_timeout_s", "must be > 0")
        _require(self.num_gpus >= 0, "learner.num_gpus", "must be >= 0")
        _require_resources(self.resources, "learner.resources")
        self._check_device()

    def _check_device(self) -> None:
        m = re.fullmatch(r"auto|cpu|cuda(?::(\d+))?", self.device)
        _require(m is not None, "learner.device",
                 f"{self.device!r} must be auto, cpu, cuda or cuda:N")
        index = int(m.group(1)) if m and m.group(1) else 0
        visible = math.ceil(self.num_gpus)
        _require(not visible or index < visible, "learner.device",
                 f"{self.device!r}: Ray shows the learner only its learner.num_gpus "
                 f"({self.num_gpus:g}) GPU(s), numbered from 0: use cuda:0..cuda:{visible - 1}")


class LoggingConfig(_Section):
    wandb_mode: Literal["offline", "online", "disabled", "auto"] = "auto"
    """auto: online when WANDB_API_KEY is set, offline otherwise."""
    wandb_project: str = "agent-r1-async"
    """W&B project name."""
    wandb_entity: str = ""
    """W&B entity (team); empty = the default one."""
    console: bool = True
    """Print a progress line per update."""
    verbose: bool = False
    """Show every process's own output (vLLM, Ray workers, warnings) on the console too; off, it goes only to RUN_DIR/logs/<role>-<index>.log (`launch --verbose`)."""
    metrics_interval_s: float = 10.0
    """How often buffer and actor metrics are aggregated and logged."""
    episodes_every: int = 10
    """Every N updates the learner samples episodes of its batch, step by step (text, tool calls, versions, importance weights), into RUN_DIR/episodes/update-N.jsonl and the W&B table `episodes/sample` (`agent-r1-async episodes RUN_DIR` prints them); 0 = off."""
    episodes_groups: int = 2
    """Groups of the batch a sample takes; each gives its best and its worst episode (episodes that tripped a reward-hacking canary are always added)."""
    episodes_failed: int = 2
    """Failed episodes (env or engine error, timeout) a sample adds, the newest the buffer kept since the previous sample."""
    episodes_context_tokens: int = 64
    """Tokens of each step's context shown before its action (the tail: what the model read last)."""
    episodes_keep: int = 20
    """Sample files kept in RUN_DIR/episodes/, the newest; 0 = keep all."""

    def __post_init__(self) -> None:
        _require(self.metrics_interval_s > 0, "logging.metrics_interval_s", "must be > 0")
        _require(self.episodes_every >= 0, "logging.episodes_every", "must be >= 0 (0 = off)")
        _require(1 <= self.episodes_groups <= 64, "logging.episodes_groups",
                 "must be in [1, 64]: groups per sample")
        _require(0 <= self.episodes_failed <= MAX_FAILED_SAMPLE, "logging.episodes_failed",
                 f"must be in [0, {MAX_FAILED_SAMPLE}]: the buffer keeps the newest "
                 f"{MAX_FAILED_SAMPLE} failed episodes")
        _require(0 <= self.episodes_context_tokens <= 4096, "logging.episodes_context_tokens",
                 "must be in [0, 4096]")
        _require(self.episodes_keep >= 0, "logging.episodes_keep", "must be >= 0 (0 = keep all)")


class EvalConfig(_Section):
    num_tasks: int = 64
    """Held-out tasks per evaluation."""
    in_launch: bool = False
    """Evaluate in `launch`: the starting policy before RL and the final checkpoint after it (eval/before/*, eval/after/*, RUN_DIR/eval.json)."""
    backend: Literal["", "vllm", "hf"] = ""
    """Engine for evaluation ("" = engine.backend)."""
    temperature: float = 1.0
    """Sampling temperature for evaluation (1.0 matches training)."""
    samples_per_task: int = 1
    """Episodes per held-out task."""
    every_updates: int = 0
    """Evaluate the latest policy every N learner versions during RL, in an evaluation actor with its own engine (run/processes/periodic_eval.py; eval/periodic/*); 0 = off."""
    every_num_tasks: int = 32
    """Held-out tasks of each periodic evaluation (the first ones of env.eval_split: a fixed subset)."""
    concurrency: int = 0
    """Episodes an evaluation plays at once; 0 = what one actor plays at once in training (`actors.groups_in_flight` x `algorithm.group_size`), the load its engine's KV cache is sized for. More episodes than the KV cache holds make the engine preempt and recompute long contexts over and over."""

    def __post_init__(self) -> None:
        _require(self.concurrency >= 0, "eval.concurrency",
                 "must be >= 0 (0 = actors.groups_in_flight x algorithm.group_size)")
        _require(self.num_tasks >= 1, "eval.num_tasks", "must be >= 1")
        _require(self.every_updates >= 0, "eval.every_updates", "must be >= 0 (0 = off)")
        _require(self.every_num_tasks >= 1, "eval.every_num_tasks", "must be >= 1")
        _require(self.temperature > 0, "eval.temperature", "must be > 0")
        _require(self.samples_per_task >= 1, "eval.samples_per_task", "must be >= 1")


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Bind hosts that only this machine can reach."""


class LaunchConfig(_Section):
    address: str = ""
    """Ray address: empty = start a local embedded Ray; "auto" or host:port = join a cluster."""
    run_root: str = "runs"
    """Directory under which each run gets RUN_DIR = run_root/name-timestamp."""
    name: str = "run"
    """Run name (prefix of the run directory and the W&B run)."""
    bind_host: str = "127.0.0.1"
    """Host the ZeroMQ sockets bind to (loopback unless a cluster needs more). `node`: each process binds its own Ray node's address (what a cluster of several nodes needs; `launch` refuses loopback on one)."""
    curve: bool = True
    """Authenticate and encrypt every ZeroMQ socket with the run's CurveZMQ keys (wire/curve.py), so only the run's processes connect, each in its role (wire/roles.py). false: an opt-out on one machine, trusting any local process that reaches the sockets."""
    num_cpus: int = 0
    """CPUs of the embedded Ray (0 = all of this machine's)."""
    max_wall_time_s: float = 0.0
    """Stop gracefully after this long (0 = no limit)."""
    seed: int = 0
    """The run's seed (in [0, 2**32)): `actors.seed`, `buffer.seed` and `learner.seed` take it unless set themselves, and held-out evaluations sample with it."""
    stop_after_failed_episodes: int = 32
    """Stop the run with the env's error when the last this-many episodes all failed (each actor's last ceil(N / actors.num_actors)); 0 = never."""
    stop_after_stall_s: float = 600.0
    """Stop the run, naming the latest failure, when no group has become ready for this long while actors end episodes and most of them fail (a shared cause, though some succeed: too few of a group's episodes complete); 0 = never."""
    stop_timeout_s: float = 300.0
    """Longest the learner's final checkpoint may take when the run stops, beyond what the update in progress (which it waits behind) may still need (`Supervisor.update_left_s`). Past it the launch ends without that checkpoint and says so (the last periodic one stands). A second Ctrl-C ends the stop at once, naming what is left unsaved."""
    unresponsive_s: float = 120.0
    """Seconds without progress after which a process is named on the console; an actor is also replaced (its credits reclaimed, its process killed for Ray to restart), the buffer and the learner only named. Above env.step_timeout_s + actors.stats_interval_s; 0 = never (docs/reliability.md, "Hung processes")."""
    warm_start: bool = False
    """Without `model.init_from`: first train the `sft` section's warm start (cached, reused by later launches with the same settings) and start RL from it."""

    def __post_init__(self) -> None:
        _require(
            bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name)),
            "launch.name",
            f"{self.name!r} must be a plain name (letters, digits, '.', '_', '-'): it names "
            "the run directory",
        )
        _require(self.num_cpus >= 0, "launch.num_cpus", "must be >= 0 (0 = all)")
        _require_seed(self.seed, "launch.seed")
        _require(self.stop_after_failed_episodes >= 0, "launch.stop_after_failed_episodes",
                 "must be >= 0 (0 = never)")
        _require(self.max_wall_time_s >= 0, "launch.max_wall_time_s", "must be >= 0 (0 = no limit)")
        _require(self.stop_after_stall_s >= 0, "launch.stop_after_stall_s", "must be >= 0 (0 = never)")
        _require(self.stop_timeout_s > 0, "launch.stop_timeout_s", "must be > 0")
        _require(self.unresponsive_s >= 0, "launch.unresponsive_s", "must be >= 0 (0 = never)")
        _require(
            self.curve or self.bind_host in LOOPBACK_HOSTS,
            "launch.bind_host",
            f"{self.bind_host!r} exposes the sockets beyond this machine: set launch.curve: "
            "true so that only this run's processes can connect",
        )


class EndpointConfig(_Section):
    host: str = "127.0.0.1"
    """Host each actor's generation endpoint binds to (actors/endpoint/: token-in/token-out and chat completions, started for `env.name: blackbox` and `verifiers`). Beyond loopback launch.curve must be on."""
    port: int = 0
    """Port of actor 0's endpoint; actor i binds port + i (0 = a free port for each)."""
    auth: Literal["token", "none"] = "token"
    """token: every request carries a bearer token, each episode's agent its session's own (actors/endpoint/auth.py). none: no check, for a trusted single-user machine only (any local process may then write steps into training); loopback only."""

    def __post_init__(self) -> None:
        _require(bool(self.host), "endpoint.host", "must name a host, e.g. 127.0.0.1")
        _require(self.auth == "token" or self.host in LOOPBACK_HOSTS, "endpoint.auth",
                 f"none is for a trusted single-user machine, and endpoint.host {self.host!r} "
                 "is beyond loopback: use token")
        _require(0 <= self.port <= 65535, "endpoint.port", f"({self.port}) must be in [0, 65535]")


class _WeightsBackend(_Section, tag_field="backend"):
    """`weights.*`: a tagged union on `weights.backend`, each backend with only its own keys."""

    @property
    def backend(self) -> str:
        return str(type(self).__struct_config__.tag)


class ZmqWeights(_WeightsBackend, tag="zmq"):
    """weights.backend: zmq — the full state dict over (Curve)ZeroMQ PUB/SUB; any engine, any
    network, never blocks the learner (the default)."""


class NativeWeights(_WeightsBackend):
    timeout_s: float = 30.0
    """Bound on every rendezvous wait and collective; a late peer fails that actor's update (counted, logged; it re-joins)."""
    rendezvous_port: int = 0
    """Port of the learner's rendezvous store on launch.bind_host (0 = any free port)."""

    def __post_init__(self) -> None:
        _require(self.timeout_s > 0, "weights.timeout_s", "must be > 0: a collective without a timeout can hang forever")
        _require(0 <= self.rendezvous_port < 65536, "weights.rendezvous_port", "must be a TCP port (0 = any free port)")


class VllmGlooWeights(NativeWeights, tag="vllm_gloo"):
    """weights.backend: vllm_gloo — vLLM's weight-transfer API with our gloo engine (CPU)."""


class VllmNcclWeights(NativeWeights, tag="vllm_nccl"):
    """weights.backend: vllm_nccl — vLLM's weight-transfer API with its NCCL engine (GPUs)."""


class VllmIpcWeights(NativeWeights, tag="vllm_ipc"):
    """weights.backend: vllm_ipc — vLLM's weight-transfer API over CUDA IPC: the engine opens
    the learner's CUDA tensors in place (learner and engine on one GPU)."""


WeightsConfig = ZmqWeights | VllmGlooWeights | VllmNcclWeights | VllmIpcWeights
"""How weights travel learner → actors (`weights.backend`: zmq, vllm_gloo, vllm_nccl, vllm_ipc)."""
WEIGHTS_BACKENDS: dict[str, type[_WeightsBackend]] = {
    "zmq": ZmqWeights, "vllm_gloo": VllmGlooWeights, "vllm_nccl": VllmNcclWeights,
    "vllm_ipc": VllmIpcWeights}


class SftConfig(_Section):
    demos_source: Literal["oracle", "jsonl"] = "oracle"
    """Demonstrations: replay the env's `oracle(task)` on `env.train_split`, or read chat transcripts."""
    jsonl_path: str = ""
    """JSONL file of {"messages": [...]} transcripts (demos_source: jsonl)."""
    num_demos: int = 64
    """Demonstration episodes to train on (0 = all the source has)."""
    epochs: int = 2
    """Passes over the demonstrations."""
    lr: float = 1.0e-4
    """AdamW learning rate of the warm start (the learner's other optimizer settings apply)."""
    batch_episodes: int = 8
    """Demonstration episodes per optimizer step (all their steps, micro-batched)."""
    eval_before: bool = True
    """Evaluate the starting model on `env.eval_split` before training."""
    eval_after: bool = True
    """Evaluate the trained checkpoint on `env.eval_split` after training."""
    eval_num_tasks: int = 32
    """Held-out tasks per evaluation."""
    log_every: int = 1
    """Print a progress line (and log metrics) every N optimizer steps."""
    schedule: Literal["constant", "linear"] = "linear"
    """Learning rate after warmup: constant, or linear decay to 0 at the last step."""
    warmup_steps: int = 0
    """Optimizer steps of linear lr warmup."""
    demo_seed: int = -1
    """Which train tasks (oracle) or transcripts (jsonl) become demonstrations: -1, the first ones in order; a seed, a random order of them drawn with it (one warm start per seed: its own sample and order)."""
    demo_offset: int = 0
    """Skip this many tasks of that order first: demonstrations that no warm start of the same order and at most this many demos saw (SFT continued on fresh demonstrations)."""
    max_wall_time_s: float = 0.0
    """Stop training after this many seconds (the step in progress completes) and save the checkpoint; 0 = run every epoch."""
    resume_from: str = ""
    """A checkpoint of an `sft` run with these demonstrations, batch and constant lr whose whole epochs are done: train on from its weights, optimizer and data order to `sft.epochs` (what one run of `sft.epochs` would give); "" = start afresh."""

    def __post_init__(self) -> None:
        _require(not self.resume_from or (self.schedule == "constant" and self.warmup_steps == 0),
                 "sft.resume_from", "needs sft.schedule: constant and sft.warmup_steps: 0 (a "
                 "schedule over all epochs cannot be resumed exactly)")
        _require(self.demo_seed >= -1, "sft.demo_seed", "must be -1 (split order) or a seed >= 0")
        _require(self.demo_offset >= 0, "sft.demo_offset", "must be >= 0")
        _require(self.max_wall_time_s >= 0, "sft.max_wall_time_s", "must be >= 0 (0 = no limit)")
        _require(
            self.demos_source != "jsonl" or bool(self.jsonl_path),
            "sft.jsonl_path", "is required when sft.demos_source is jsonl",
        )
        _require(self.num_demos >= 0, "sft.num_demos", "must be >= 0 (0 = all)")
        _require(self.epochs >= 1, "sft.epochs", "must be >= 1")
        _require(self.lr > 0, "sft.lr", "must be > 0")
        _require(self.batch_episodes >= 1, "sft.batch_episodes", "must be >= 1")
        _require(self.eval_num_tasks >= 1, "sft.eval_num_tasks", "must be >= 1")
        _require(self.log_every >= 1, "sft.log_every", "must be >= 1")
        _require(self.warmup_steps >= 0, "sft.warmup_steps", "must be >= 0")


class RunConfig(_Section):
    """A whole run: one section per component."""

    model: ModelConfig = msgspec.field(default_factory=ModelConfig)
    """Policy model."""
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    """Actor inference engine."""
    context: ContextConfig = msgspec.field(default_factory=ContextConfig)
    """How step contexts are built from the interaction history."""
    env: EnvConfig = msgspec.field(default_factory=EnvConfig)
    """Environment and tasks."""
    actors: ActorsConfig = msgspec.field(default_factory=ActorsConfig)
    """Actor processes."""
    buffer: BufferConfig = msgspec.field(default_factory=BufferConfig)
    """Prioritized episode buffer."""
    algorithm: AlgorithmConfig = msgspec.field(default_factory=AlgorithmConfig)
    """RL objective and advantages."""
    learner: LearnerConfig = msgspec.field(default_factory=LearnerConfig)
    """Optimization."""
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)
    """Metrics sinks."""
    eval: EvalConfig = msgspec.field(default_factory=EvalConfig)
    """Held-out evaluation."""
    launch: LaunchConfig = msgspec.field(default_factory=LaunchConfig)
    """Process placement and run directory."""
    sft: SftConfig = msgspec.field(default_factory=SftConfig)
    """Supervised warm start on demonstrations (`agent-r1-async sft`)."""
    weights: WeightsConfig = msgspec.field(default_factory=ZmqWeights)
    """Weight transfer learner → actors."""
    endpoint: EndpointConfig = msgspec.field(default_factory=EndpointConfig)
    """Each actor's generation endpoint for agents you did not write (env.name: blackbox)."""

    def __post_init__(self) -> None:
        _require(
            self.launch.curve or self.endpoint.host in LOOPBACK_HOSTS,
            "endpoint.host",
            f"{self.endpoint.host!r} exposes the actors' generation endpoints beyond this "
            "machine: set launch.curve: true (each actor's bearer token comes from its "
            "CurveZMQ keys)",
        )
        _require(
            self.endpoint.port == 0 or self.endpoint.port + self.actors.num_actors - 1 <= 65535,
            "endpoint.port",
            f"({self.endpoint.port}) + actors.num_actors - 1 must be at most 65535: actor i "
            "binds endpoint.port + i",
        )
        _require(
            self.context.max_tokens + self.engine.max_new_tokens <= self.model.max_model_len
            or self.context.builder not in ("truncate", "compact"),
            "context.max_tokens",
            f"context.max_tokens ({self.context.max_tokens}) + engine.max_new_tokens "
            f"({self.engine.max_new_tokens}) must fit in model.max_model_len "
            f"({self.model.max_model_len})",
        )
        _require(
            self.context.max_tokens + self.context.summary_max_tokens < self.model.max_model_len
            or self.context.builder != "compact",
            "context.max_tokens",
            f"context.max_tokens ({self.context.max_tokens}) + context.summary_max_tokens "
            f"({self.context.summary_max_tokens}) must leave room in model.max_model_len "
            f"({self.model.max_model_len}) for the compaction request (context.summary_prompt): "
            "a context at the budget, the request and a whole summary are one step",
        )
        _require(
            self.buffer.min_group_episodes <= self.algorithm.group_size,
            "buffer.min_group_episodes",
            f"cannot exceed algorithm.group_size ({self.algorithm.group_size})",
        )
        _require(
            self.engine.max_new_tokens < self.model.max_model_len,
            "engine.max_new_tokens",
            f"({self.engine.max_new_tokens}) must be below model.max_model_len "
            f"({self.model.max_model_len}): the context needs room too",
        )
        room = (self.buffer.max_staleness + 1) * self.algorithm.batch_groups
        _require(
            self.buffer.min_groups_to_sample <= room,
            "buffer.min_groups_to_sample",
            f"({self.buffer.min_groups_to_sample}) cannot exceed (buffer.max_staleness + 1) × "
            f"algorithm.batch_groups = {room}: admission control never lets more groups in "
            "before the first update, so the learner would wait forever",
        )
        _require(
            self.algorithm.name != "ppo" or self.algorithm.credit == "step"
            or self.env.max_turns == 1,
            "algorithm.credit",
            "ppo's GAE is computed per step; use credit: step for multi-turn envs",
        )
        _require(
            self.eval.every_updates == 0 or (self.weights.backend == "zmq"
                                             and self.eval.every_updates % self.learner.publish_every == 0),
            "eval.every_updates",
            f"({self.eval.every_updates}) needs weights.backend zmq (the evaluator subscribes to "
            f"the weights) and a multiple of learner.publish_every ({self.learner.publish_every}), "
            "or the versions it is due at are never published",
        )
        quiet = self.env.step_timeout_s + self.actors.stats_interval_s
        _require(
            self.launch.unresponsive_s == 0 or self.launch.unresponsive_s > quiet,
            "launch.unresponsive_s",
            f"({self.launch.unresponsive_s:g} s) must exceed env.step_timeout_s + "
            f"actors.stats_interval_s = {quiet:g} s: an actor waiting on one slow env step "
            "between two reports would count as hung (0 = never judge)",
        )
        _require(
            self.weights.backend == "zmq" or self.engine.backend == "vllm",
            "weights.backend",
            f"{self.weights.backend} is vLLM's weight-transfer API; engine.backend "
            f"{self.engine.backend!r} receives weights over zmq only",
        )


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def _format_path(msgspec_path: str) -> str:
    """`$.buffer.alpha` / `$.x[0]` -> `buffer.alpha` / `x[0]`."""
    return msgspec_path.removeprefix("$").removeprefix(".")


_RULE = re.compile(r"^[a-z_]+\.[a-z_.]+: ")

_DERIVED = {
    "buffer.vocab_size": "the policy model's config.json `vocab_size`",
    "buffer.max_model_len": "`model.max_model_len`",
    "buffer.max_steps": "`env.max_turns`",
    "buffer.max_actors": "`actors.num_actors`",
}
"""Former buffer keys whose values the launch derives (`RecordBounds`, buffers/validate.py)."""


def _translate(err: msgspec.ValidationError) -> ConfigError:
    msg = str(err)
    head, sep, path = msg.rpartition(" - at `")
    if sep:
        key = _format_path(path.rstrip("`"))
        if _RULE.match(head):  # a cross-field rule: its message already names the key
            return ConfigError(head)
        if head.startswith("Object contains unknown field"):
            field = head.split("`")[1]
            full = f"{key}.{field}" if key else field
            if full in _DERIVED:
                return ConfigError(f"unknown config key `{full}`: no longer a setting; the "
                                   f"launch derives it from {_DERIVED[full]}")
            if key == "weights":
                return ConfigError(_weights_key_error(field))
            return ConfigError(f"unknown config key `{full}`")
        if key == "weights.backend" and head.startswith("Invalid value"):
            return ConfigError(f"config key `weights.backend`: {head.removeprefix('Invalid value ')}"
                               f" is not one of {', '.join(WEIGHTS_BACKENDS)}")
        return ConfigError(f"config key `{key}`: {with_choices(head, RunConfig, key)}")
    if msg.startswith("Object contains unknown field"):
        return ConfigError(f"unknown config key `{msg.split('`')[1]}`")
    return ConfigError(msg)


def with_choices(error: str, root: type, key: str) -> str:
    """msgspec's `Invalid enum value 'x'` for the Literal field at dotted `key` of the struct
    `root`, with the values it takes appended; any other error unchanged."""
    if not error.startswith("Invalid enum value"):
        return error
    choices = _literal_values(msgspec.inspect.type_info(root), key.split(".") if key else [])
    shown = [str(v).lower() if isinstance(v, bool) else str(v) for v in choices]
    return f"{error} (one of {', '.join(shown)})" if shown else error


def _literal_values(info: Any, parts: list[str]) -> tuple[Any, ...]:
    """The values of the Literal that `parts` (field names, `name[i]` for list items, `name{}`
    for a dict's keys) reach from the msgspec type `info`; () where they reach none."""
    mi = msgspec.inspect
    if isinstance(info, mi.UnionType):
        return tuple(v for t in info.types for v in _literal_values(t, parts))
    if not parts:
        if isinstance(info, mi.BoolType):
            return (True, False)
        return info.values if isinstance(info, mi.LiteralType) else ()
    name, _, index = parts[0].partition("[")
    if not isinstance(info, mi.StructType):
        return ()
    field = next((f for f in info.fields if f.encode_name == name.removesuffix("{}")), None)
    if field is None:
        return ()
    inner: Any = field.type
    if name.endswith("{}"):  # `name{}`: the keys of a dict field
        dicts = inner.types if isinstance(inner, mi.UnionType) else (inner,)
        return next((_literal_values(d.key_type, parts[1:]) for d in dicts
                     if isinstance(d, mi.DictType)), ())
    for _ in range(index.count("]")):  # each `[i]`: one level into a list or tuple
        inner = getattr(inner, "item_type", None)
    return _literal_values(inner, parts[1:]) if inner is not None else ()


SEEDED_SECTIONS = ("actors", "buffer", "learner")
"""Sections whose `seed` defaults to `launch.seed`."""


def _seed_sections(data: dict[str, Any]) -> None:
    """`launch.seed` into each seeded section that does not set its own (in place)."""
    launch = data.get("launch")
    if not isinstance(launch, dict) or "seed" not in launch:
        return
    seed = launch["seed"]
    if type(seed) is not int or not 0 <= seed < SEED_LIMIT:
        return  # `launch.seed`'s own check names it
    for name in SEEDED_SECTIONS:
        section = data.setdefault(name, {})
        if isinstance(section, dict):
            section.setdefault("seed", launch["seed"])


def _weights_key_error(field: str) -> str:
    """`weights.<field>` set for a backend that has no such key: name the ones that do."""
    owners = [name for name, cls in WEIGHTS_BACKENDS.items() if field in cls.__struct_fields__]
    if not owners:
        return f"unknown config key `weights.{field}`"
    return (f"config key `weights.{field}`: only weights.backend {' or '.join(owners)} takes "
            "it (set weights.backend with it)")


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: `{'.'.join(parts[: i + 1])}` is not a section")
        node = child
    node[parts[-1]] = value


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-5` / `2e-06` (no dot) as floats, as YAML 1.2 does."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """Parse `a.b.c=value` strings; values are YAML (numbers, bools, lists)."""
    out = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. buffer.alpha=0.6")
        try:
            value = _yaml_load(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({e})") from None
        out.append((key.strip(), value))
    return out


def config_from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> RunConfig:
    """Validate a plain dict (from YAML) plus `a.b=value` overrides into a RunConfig."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of sections, got {type(data).__name__}")
    for key, value in parse_overrides(overrides or []):
        _set_path(data, key, value)
    _seed_sections(data)
    weights = data.get("weights")
    if isinstance(weights, dict) and "backend" not in weights:  # the default backend's tag
        data["weights"] = {"backend": "zmq", **weights}
    try:
        return msgspec.convert(data, RunConfig)
    except msgspec.ValidationError as e:
        raise _translate(e) from None


def load_config(path: str | os.PathLike[str] | None, overrides: list[str] | None = None) -> RunConfig:
    """Load a YAML config (None = all defaults) and apply overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            data = _yaml_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if data is None:  # an empty file is more likely a mistake than a wish for all defaults
            raise ConfigError(
                f"config file {str(p)!r} is empty: for the built-in defaults write `{{}}` in it "
                "(or give no --config for configs/default.yaml)")
    return config_from_dict(data, overrides)


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    return msgspec.to_builtins(cfg)


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
