"""The prompt budget: does an env's first prompt leave room for an action?

`prompt_budget(cfg)` loads the policy's tokenizer (cheaply: only what is on disk already) and
the run's context builder (actors/context.py); `PromptBudget.tokens(obs)` is the length of the
first context the policy would see after a reset, which must stay below
`model.max_model_len` (the rollout refuses it otherwise). `envs check` (env_check.py) checks
every reset it plays against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_r1_async.config import RunConfig
from agent_r1_async.envs.base import Observation


@dataclass
class PromptBudget:
    """The policy's chat template and `model.max_model_len`: a reset's prompt must leave room
    for an action (the rollout refuses it otherwise)."""

    tokenizer: Any
    max_model_len: int
    builder: Any
    """The run's context builder (actors/context.py)."""
    model: str

    def tokens(self, obs: Observation) -> int:
        """The tokens of the first context the policy would see after this reset."""
        from agent_r1_async.actors.context import History

        history = History(self.tokenizer)
        history.add_messages(obs.messages, obs.tools)
        return len(self.builder.build(history))


def prompt_budget(cfg: RunConfig) -> tuple[PromptBudget | None, str]:
    """The policy's `PromptBudget`, or (None, why not) when its tokenizer cannot be loaded
    cheaply here: a known model not prepared yet is not converted for this (`launch` and
    `prepare-model` do that), and a hub id is only looked up in the local cache."""
    from agent_r1_async.actors.context import make_context_builder
    from agent_r1_async.models import KNOWN_MODELS, cache_dir, load_tokenizer, resolve_model

    model = cfg.model.start_from
    # The directory prepare_model builds; build_atomically marks it complete.
    if model in KNOWN_MODELS and not (cache_dir() / "models" / model / ".complete").is_file():
        return None, (f"{model} is not prepared yet (`agent-r1-async prepare-model {model}`; "
                      "a launch prepares it too)")
    try:
        path = resolve_model(model)
        if Path(path).is_dir():
            tokenizer = load_tokenizer(path)
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        builder = make_context_builder(cfg.context, tokenizer)
    except Exception as e:
        return None, f"the tokenizer of {model!r} cannot be loaded here: {one_line(e)}"
    return PromptBudget(tokenizer, cfg.model.max_model_len, builder, model), ""


def one_line(e: BaseException) -> str:
    """An exception as one line of a report: its type and its message's first line."""
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {text[:200]}".rstrip(": ")
