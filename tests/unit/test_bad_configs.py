"""Bad configs: a table of wrong configs and the error each gives (docs/reliability.md lists it).

Extends tests/unit/test_config.py (which holds the first table: unknown keys, a string for a
float, an unknown backend, num_actors 0, GRPO with group_size 1, min_group_episodes above the
group size, a truncate budget that does not fit, malformed --set). Every error here is a
`ConfigError` raised at load time, before any process starts, and its message names the key.

There is no "batch not divisible by the group size" case to reject: the batch is given in
groups (`algorithm.batch_groups`), so it is a whole number of groups by construction, and a
flat episode count (`algorithm.batch_size`) is refused as an unknown key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_r1_async.config import ConfigError, config_from_dict, load_config

BAD_CONFIGS: list[tuple[str, dict, str]] = [
    # (what is wrong, config, the error it gives: a substring of the message)
    ("typo in a key", {"env": {"max_turn": 3}}, "unknown config key `env.max_turn`"),
    ("batch as episodes", {"algorithm": {"batch_size": 6}},
     "unknown config key `algorithm.batch_size`"),
    ("string for an int", {"actors": {"num_actors": "two"}},
     "config key `actors.num_actors`: Expected `int`, got `str`"),
    ("float for an int", {"algorithm": {"group_size": 2.5}},
     "config key `algorithm.group_size`: Expected `int`, got `float`"),
    ("string for a list", {"engine": {"stop": "</answer>"}},
     "config key `engine.stop`: Expected `array`, got `str`"),
    ("string for a bool", {"launch": {"curve": "yes"}},
     "config key `launch.curve`: Expected `bool`, got `str`"),
    ("number for a section", {"buffer": 5},
     "config key `buffer`: Expected `object`, got `int`"),
    ("unknown algorithm", {"algorithm": {"name": "dpo"}},
     "config key `algorithm.name`: Invalid enum value 'dpo'"),
    ("empty model name", {"model": {"name_or_path": " "}}, "model.name_or_path: must name a model"),
    ("vLLM weight transfer on the transformers engine",
     {"engine": {"backend": "hf"}, "weights": {"backend": "vllm_gloo"}},
     "weights.backend: vllm_gloo is vLLM's weight-transfer API; engine.backend 'hf'"),
    ("unknown weight backend", {"weights": {"backend": "rdma"}},
     "config key `weights.backend`: 'rdma' is not one of zmq, vllm_gloo, vllm_nccl"),
    ("collectives without a timeout", {"weights": {"backend": "vllm_gloo", "timeout_s": 0}},
     "weights.timeout_s: must be > 0"),
    ("a native backend's key on zmq", {"weights": {"timeout_s": 5}},
     "config key `weights.timeout_s`: only weights.backend vllm_gloo or vllm_nccl takes it"),
    ("a key no weight backend has", {"weights": {"backend": "vllm_nccl", "port": 5}},
     "unknown config key `weights.port`"),
    ("action budget fills the context", {"model": {"max_model_len": 128},
                                         "engine": {"max_new_tokens": 256}},
     "engine.max_new_tokens: (256) must be below model.max_model_len (128)"),
    ("tool timeout above step timeout", {"env": {"tool_timeout_s": 90, "step_timeout_s": 60}},
     "env.tool_timeout_s: (90 s) cannot exceed env.step_timeout_s (60 s)"),
    ("first sample can never happen", {"buffer": {"min_groups_to_sample": 20, "max_staleness": 1},
                                       "algorithm": {"batch_groups": 4}},
     "buffer.min_groups_to_sample: (20) cannot exceed (buffer.max_staleness + 1) × "
     "algorithm.batch_groups = 8"),
    ("ppo with token credit, multi-turn", {"algorithm": {"name": "ppo", "credit": "token"},
                                           "env": {"max_turns": 3}},
     "algorithm.credit: ppo's GAE is computed per step"),
    ("public bind without keys", {"launch": {"bind_host": "0.0.0.0", "curve": False}},
     "launch.bind_host: '0.0.0.0' exposes the sockets beyond this machine"),
    ("run name that escapes run_root", {"launch": {"name": "../elsewhere"}},
     "launch.name: '../elsewhere' must be a plain name"),
    ("frame limit below a record", {"buffer": {"max_frame_bytes": 1024}},
     "buffer.max_frame_bytes: must be at least 64 KiB"),
    ("negative staleness", {"buffer": {"max_staleness": -1}}, "buffer.max_staleness: must be >= 0"),
    ("mask window inverted", {"algorithm": {"is_mask_low": 0.5, "is_mask_high": 0.4}},
     "algorithm.is_mask_high: must be 0 (off) or greater than algorithm.is_mask_low"),
    ("one AdamW beta", {"learner": {"betas": [0.9]}}, "learner.betas: must be two numbers"),
    ("mmap threshold above glibc's", {"learner": {"malloc_mmap_threshold_kb": 65536}},
     "learner.malloc_mmap_threshold_kb: must be in [0, 32768]"),
    ("unknown recompute", {"learner": {"checkpoint_recompute": "some"}},
     "learner.checkpoint_recompute"),
    ("unknown allocator", {"learner": {"allocator": "tcmalloc"}}, "learner.allocator"),
    ("greedy sampling", {"engine": {"temperature": 0}}, "engine.temperature: must be > 0"),
    ("LoRA rank 0", {"learner": {"lora": {"enabled": True, "rank": 0}}},
     "learner.lora.rank: must be >= 1"),
    ("no eval tasks", {"eval": {"num_tasks": 0}}, "eval.num_tasks: must be >= 1"),
    ("zero metrics interval", {"logging": {"metrics_interval_s": 0}},
     "logging.metrics_interval_s: must be > 0"),
    ("a buffer bound the launch derives", {"buffer": {"max_model_len": 100}},
     "unknown config key `buffer.max_model_len`: no longer a setting; the launch derives it "
     "from `model.max_model_len`"),
]


@pytest.mark.parametrize(("what", "data", "message"), BAD_CONFIGS,
                         ids=[w for w, _, _ in BAD_CONFIGS])
def test_bad_config_gives_its_error(what: str, data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert message in str(info.value), f"{what}: {info.value}"


def test_the_table_is_long_enough_and_every_error_names_a_key() -> None:
    assert len(BAD_CONFIGS) >= 10
    for _, data, message in BAD_CONFIGS:
        section = next(iter(data))
        assert section in message, message


def test_the_secure_and_the_loopback_variants_are_fine() -> None:
    assert config_from_dict({"launch": {"bind_host": "0.0.0.0", "curve": True}}).launch.curve
    assert config_from_dict({"launch": {"bind_host": "localhost"}}).launch.bind_host == "localhost"


def test_the_same_errors_come_from_yaml_files_and_set(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("env:\n  tool_timeout_s: 90\n  step_timeout_s: 60\n")
    with pytest.raises(ConfigError, match=r"env\.tool_timeout_s"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"engine\.max_new_tokens"):
        load_config(None, ["model.max_model_len=128", "engine.max_new_tokens=256"])


@pytest.mark.parametrize(("key", "source"), [
    ("max_model_len", "`model.max_model_len`"),
    ("max_steps", "`env.max_turns`"),
    ("max_actors", "`actors.num_actors`"),
    ("vocab_size", "the policy model's config.json `vocab_size`"),
])
def test_the_former_buffer_bounds_are_refused_naming_their_source(
        tmp_path: Path, key: str, source: str) -> None:
    """The record bounds are derived at launch (`RecordBounds`, buffers/validate.py): a config
    that still sets one (a file, `--set`, even its old "derive it" value 0) is refused."""
    expected = (f"unknown config key `buffer.{key}`: no longer a setting; the launch derives it "
                f"from {source}")
    path = tmp_path / "old.yaml"
    path.write_text(f"buffer:\n  {key}: 0\n")
    for load in (lambda: load_config(path), lambda: load_config(None, [f"buffer.{key}=7"])):
        with pytest.raises(ConfigError) as info:
            load()
        assert str(info.value) == expected


# ---- a missing model fails at launch start, before Ray or a run directory ----------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("model.name_or_path", "./no/such/dir",
         "model.name_or_path: model directory './no/such/dir' does not exist"),
        ("model.name_or_path", "EMPTY_DIR", "has no config.json (not a HF model)"),
        ("model.init_from", "./no/such/checkpoint",
         "model.init_from: model directory './no/such/checkpoint' does not exist"),
    ],
)
def test_missing_model_fails_before_ray_starts(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    from agent_r1_async.run.launch import launch

    if value == "EMPTY_DIR":
        (tmp_path / "empty").mkdir()
        value = str(tmp_path / "empty")
    run_root = tmp_path / "runs"
    cfg = load_config(None, [f"{key}={value}", f"launch.run_root={run_root}"])
    ray_before = "ray" in sys.modules
    with pytest.raises(ConfigError) as info:
        launch(cfg)
    assert message in str(info.value)
    assert not run_root.exists()  # no run directory was made
    if not ray_before:
        assert "ray" not in sys.modules  # Ray was not even imported, let alone started


def test_cli_reports_a_missing_model_as_a_config_error(tmp_path: Path, capsys) -> None:
    from agent_r1_async.cli import main

    code = main(["launch", "--set", "model.name_or_path=./no/such/dir",
                 "--set", f"launch.run_root={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "config error: model.name_or_path: model directory './no/such/dir' does not exist" in err
