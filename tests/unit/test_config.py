"""Config: every shipped config parses; bad keys, types and combinations name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict, load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_there_are_configs():
    assert any(p.name == "default.yaml" for p in CONFIGS)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_file_parses(path: Path):
    cfg = load_config(path)
    assert isinstance(cfg, RunConfig)


def test_defaults_and_overrides():
    cfg = config_from_dict({"buffer": {"alpha": 0.5}}, ["buffer.max_staleness=0",
                                                         "engine.stop=['</answer>']",
                                                         "learner.lora.enabled=true"])
    assert cfg.buffer.alpha == 0.5
    assert cfg.buffer.max_staleness == 0
    assert cfg.engine.stop == ["</answer>"]
    assert cfg.learner.lora.enabled is True
    assert cfg.learner.betas == [0.9, 0.999]


@pytest.mark.parametrize(
    ("data", "overrides", "message"),
    [
        ({"buffer": {"max_stalenes": 1}}, [], "unknown config key `buffer.max_stalenes`"),
        ({"bufer": {}}, [], "unknown config key `bufer`"),
        ({}, ["learner.lora.rnak=4"], "unknown config key `learner.lora.rnak`"),
        ({"learner": {"lr": "fast"}}, [], "config key `learner.lr`: Expected `float`, got `str`"),
        ({"engine": {"backend": "tgi"}}, [], "config key `engine.backend`"),
        ({"actors": {"num_actors": 0}}, [], "actors.num_actors: must be >= 1"),
        ({"algorithm": {"name": "grpo", "group_size": 1}}, [],
         "algorithm.group_size: grpo needs at least 2 episodes"),
        ({"buffer": {"min_group_episodes": 8}}, [],
         "buffer.min_group_episodes: cannot exceed algorithm.group_size (4)"),
        ({"context": {"builder": "truncate", "max_tokens": 2000}}, [],
         "context.max_tokens: context.max_tokens (2000) + engine.max_new_tokens (256)"),
        ({}, ["buffer.alpha"], "expected KEY=VALUE"),
        ({}, ["buffer.alpha.x=1"], "config key `buffer.alpha`: Expected `float`, got `object`"),
        ({"buffer": {"alpha": 0.5}}, ["buffer.alpha.x=1"], "`buffer.alpha` is not a section"),
        ([1, 2], [], "a config must be a mapping"),
        ({}, ["learner.world_size=0"], "learner.world_size: must be >= 1"),
        ({}, ["learner.cpu_offload=true", "learner.device=cpu"],
         "learner.cpu_offload: offloads GPU memory to the CPU; learner.device is cpu"),
        ({}, ["learner.backend=mpi"], "config key `learner.backend`: Invalid enum value 'mpi'"),
        ({}, ["learner.backend=nccl", "learner.device=cpu"],
         "learner.backend: nccl needs CUDA devices; learner.device is cpu"),
        ({}, ["learner.world_size=2", "learner.lora.enabled=true"],
         "learner.world_size: LoRA (learner.lora.enabled) trains with one learner process only"),
    ],
)
def test_bad_configs_name_the_key(data, overrides, message):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, overrides)
    assert message in str(info.value)


def test_missing_file_and_bad_yaml(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("buffer: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_every_field_has_a_docstring_line():
    import ast
    import inspect

    import agent_r1_async.config as config_mod

    tree = ast.parse(inspect.getsource(config_mod))
    missing = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
            body = node.body
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.AnnAssign):
                    nxt = body[i + 1] if i + 1 < len(body) else None
                    if not (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)):
                        missing.append(f"{node.name}.{stmt.target.id}")
    assert missing == []


def test_exponent_without_dot_is_a_float(tmp_path: Path):
    # YAML 1.1 (PyYAML) reads `2e-06` as a string; users write it anyway.
    cfg = config_from_dict({}, ["learner.lr=2e-06"])
    assert cfg.learner.lr == 2e-06
    f = tmp_path / "c.yaml"
    f.write_text("learner:\n  lr: 1e-5\n")
    assert load_config(f).learner.lr == 1e-5
    assert config_from_dict({}, ["launch.name=1e5x"]).launch.name == "1e5x"


def test_weights_is_a_tagged_union_each_backend_with_its_own_keys() -> None:
    from agent_r1_async.config import VllmGlooWeights, ZmqWeights, dump_config

    default = config_from_dict({})
    assert isinstance(default.weights, ZmqWeights) and default.weights.backend == "zmq"
    native = config_from_dict({}, ["weights.backend=vllm_gloo", "weights.timeout_s=5"])
    assert native.weights == VllmGlooWeights(timeout_s=5.0, rendezvous_port=0)
    assert native.weights.backend == "vllm_gloo"
    dumped = yaml.safe_load(dump_config(native))["weights"]
    assert dumped == {"backend": "vllm_gloo", "timeout_s": 5.0, "rendezvous_port": 0}
    assert config_from_dict({"weights": dumped}).weights == native.weights


def test_launch_seed_seeds_the_sections_that_do_not_set_their_own() -> None:
    cfg = config_from_dict({"launch": {"seed": 7}, "buffer": {"seed": 3}})
    assert (cfg.launch.seed, cfg.actors.seed, cfg.buffer.seed, cfg.learner.seed) == (7, 7, 3, 7)
    over = config_from_dict({}, ["launch.seed=11", "learner.seed=2"])
    assert (over.actors.seed, over.buffer.seed, over.learner.seed) == (11, 11, 2)
    unset = config_from_dict({})
    assert (unset.launch.seed, unset.actors.seed, unset.buffer.seed, unset.learner.seed) == (0, 0, 0, 0)
