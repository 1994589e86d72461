"""config.py: every shipped config parses, and configs that are wrong or cannot run fail
before anything starts with a one-line `ConfigError` naming the key.

The first table (`test_bad_configs_name_the_key`): unknown keys, a string for a float, an
unknown backend, num_actors 0, GRPO with group_size 1, min_group_episodes above the group
size, a truncate budget that does not fit, malformed --set.

Bad configs (`test_bad_config_gives_its_error`, docs/reliability.md lists it): a table of
wrong configs and the error each gives. Every error there is a `ConfigError` raised at load
time, before any process starts, and its message names the key. There is no "batch not
divisible by the group size" case to reject: the batch is given in groups
(`algorithm.batch_groups`), so it is a whole number of groups by construction, and a flat
episode count (`algorithm.batch_size`) is refused as an unknown key.

Configs that cannot run (`test_unrunnable_config_fails_before_ray`) fail at load (config.py)
or in `launch`'s preflight (run/preflight/), with a one-line `ConfigError` naming the key and
what was expected, before Ray is imported. Without these checks each such case hangs, or
fails after Ray started with a traceback; `already` marks the cases that an older check
catches. Base config: configs/tiny.yaml (learner 1 CPU, 2 actors × 1 CPU, group_size 2,
max_turns 2, max_model_len 512, max_new_tokens 16, buffer.max_bytes 1 GiB).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import yaml

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict, load_config
from agent_r1_async.run.preflight.memory import _physical_memory

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
        ({}, ["learner.backend=mpi"],
         "config key `learner.backend`: Invalid enum value 'mpi' (one of auto, gloo, nccl)"),
        ({}, ["learner.bf16=half"],
         "config key `learner.bf16`: Invalid enum value 'half' (one of true, false, auto)"),
        ({}, ["learner.backend=nccl", "learner.device=cpu"],
         "learner.backend: nccl needs CUDA devices; learner.device is cpu"),
        ({}, ["learner.world_size=2", "learner.lora.enabled=true"],
         "learner.world_size: LoRA (learner.lora.enabled) trains with one learner process only"),
        ({}, ["learner.compile=true", "learner.world_size=2"],
         "learner.compile: compiles one learner process without LoRA; learner.world_size is 2"),
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


MAX_FIELD_DOC = 400
"""Characters a field's docstring may have: what, unit, default, why in a line or two;
measurements belong in BENCHMARKS.md, explanations in docs/."""


def field_docstrings(source: str) -> dict[str, str | None]:
    """{field: its docstring (the string right below it), or None} of the annotated fields of
    the one class `source` defines, read with `ast`."""
    import ast
    import textwrap

    (node,) = ast.parse(textwrap.dedent(source)).body
    assert isinstance(node, ast.ClassDef)
    docs: dict[str, str | None] = {}
    for i, stmt in enumerate(node.body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            nxt = node.body[i + 1] if i + 1 < len(node.body) else None
            is_doc = (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                      and isinstance(nxt.value.value, str))
            docs[stmt.target.id] = nxt.value.value if is_doc else None  # type: ignore[union-attr]
    return docs


def structs_reached(root: type) -> list[type]:
    """`root` and every Struct class its fields hold (nested sections, list items, unions)."""
    import msgspec.inspect as mi

    found: dict[type, None] = {}

    def walk(info: object) -> None:
        if isinstance(info, mi.StructType):
            if info.cls in found:
                return
            found[info.cls] = None
            for f in info.fields:
                walk(f.type)
        for attr in ("types", "item_type", "key_type", "value_type"):
            inner = getattr(info, attr, None)
            for t in inner if isinstance(inner, tuple) else [inner]:
                if isinstance(t, mi.Type):
                    walk(t)

    walk(mi.type_info(root))
    return list(found)


def doc_problems(sources: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """({class name: class source}) -> (fields without a docstring, {field: length} of the
    docstrings over `MAX_FIELD_DOC`)."""
    missing, long = [], {}
    for cls, source in sources.items():
        for name, doc in field_docstrings(source).items():
            if doc is None:
                missing.append(f"{cls}.{name}")
            elif len(doc) > MAX_FIELD_DOC:
                long[f"{cls}.{name}"] = len(doc)
    return missing, long


def sources_of(classes: list[type]) -> dict[str, str]:
    import inspect

    return {c.__name__: inspect.getsource(c) for c in classes}


def test_every_config_field_has_a_short_docstring():
    sections = structs_reached(RunConfig)
    assert len(sections) > 15 and any(c.__name__ == "LoraConfig" for c in sections)
    assert doc_problems(sources_of(sections)) == ([], {})


def test_every_built_in_env_argument_has_a_short_docstring():
    from agent_r1_async.envs import registry

    classes = [c for name in registry._BUILTINS  # the built-in envs' `env.args`
               for c in structs_reached(registry.resolve(name).Args)]
    assert any(c.__name__ == "McpServerArgs" for c in classes)  # nested structs are read too
    assert doc_problems(sources_of(classes)) == ([], {})


class _Inner(msgspec.Struct):
    a: int = 0


class _Outer(msgspec.Struct):
    inner: list[_Inner] | None = None
    """Items."""


def test_the_docstring_check_finds_a_missing_and_a_long_one():
    assert structs_reached(_Outer) == [_Outer, _Inner]
    long = "x" * (MAX_FIELD_DOC + 1)
    source = f'class C:\n    a: int = 0\n    b: str = ""\n    """{long}"""\n    c: int = 1\n    """ok"""\n'
    assert doc_problems({"C": source, **sources_of([_Outer])}) == (["C.a"], {"C.b": MAX_FIELD_DOC + 1})


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


BAD_CONFIGS: list[tuple[str, dict, str]] = [
    # (what is wrong, config, the error it gives: a substring of the message)
    ("typo in a key", {"env": {"max_turn": 3}}, "unknown config key `env.max_turn`"),
    ("a cut above the budget", {"context": {"builder": "truncate", "max_tokens": 900,
                                             "truncate_to": 1000}},
     "context.truncate_to: must be between 0 (= context.max_tokens) and context.max_tokens (900)"),
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
     "config key `algorithm.name`: Invalid enum value 'dpo' (one of grpo, ppo, reinforce_pp, rloo)"),
    ("empty model name", {"model": {"name_or_path": " "}}, "model.name_or_path: must name a model"),
    ("vLLM weight transfer on the transformers engine",
     {"engine": {"backend": "hf"}, "weights": {"backend": "vllm_gloo"}},
     "weights.backend: vllm_gloo is vLLM's weight-transfer API; engine.backend 'hf'"),
    ("unknown weight backend", {"weights": {"backend": "rdma"}},
     "config key `weights.backend`: 'rdma' is not one of zmq, vllm_gloo, vllm_nccl"),
    ("collectives without a timeout", {"weights": {"backend": "vllm_gloo", "timeout_s": 0}},
     "weights.timeout_s: must be > 0"),
    ("a native backend's key on zmq", {"weights": {"timeout_s": 5}},
     "config key `weights.timeout_s`: only weights.backend vllm_gloo or vllm_nccl or vllm_ipc "
     "takes it"),
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
    ("negative episode sampling", {"logging": {"episodes_every": -1}},
     "logging.episodes_every: must be >= 0 (0 = off)"),
    ("no group to sample episodes of", {"logging": {"episodes_groups": 0}},
     "logging.episodes_groups: must be in [1, 64]"),
    ("more failed episodes than the buffer keeps", {"logging": {"episodes_failed": 9}},
     "logging.episodes_failed: must be in [0, 8]: the buffer keeps the newest 8"),
    ("a context tail past any context", {"logging": {"episodes_context_tokens": 5000}},
     "logging.episodes_context_tokens: must be in [0, 4096]"),
    ("negative sample files kept", {"logging": {"episodes_keep": -1}},
     "logging.episodes_keep: must be >= 0 (0 = keep all)"),
    ("a buffer bound the launch derives", {"buffer": {"max_model_len": 100}},
     "unknown config key `buffer.max_model_len`: no longer a setting; the launch derives it "
     "from `model.max_model_len`"),
    ("negative liveness bound", {"launch": {"unresponsive_s": -1}},
     "launch.unresponsive_s: must be >= 0 (0 = never)"),
    ("liveness bound inside one env step", {"launch": {"unresponsive_s": 30}},
     "launch.unresponsive_s: (30 s) must exceed env.step_timeout_s + actors.stats_interval_s "
     "= 65 s: an actor waiting on one slow env step between two reports would count as hung"),
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


REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "tiny.yaml"
BIG = 10**30
SECTIONS = ("actors.", "buffer.", "env.", "learner.", "algorithm.", "launch.")

# Worst-case buffer bytes of one tiny episode as the wire decodes it (buffers/assembly.py:
# 400 B a record, 80 B an array, int32 ids, float64 log-probs, 40 B a listed version): a step
# is 400 + 3 × 80 + 4 × (512 - 16) context ids + (4 + 8 + 40) × 16 action ids, log-probs and
# versions = 3456 B; 2 steps + a 400 B EpisodeEnd = 7312 B; a group of 2 = 14624 B;
# 10^6 groups = 1.4624e10 B = 13.6 GiB; 1 GiB // 14624 = 73423 groups fit.
CASES: list[tuple[str, list[str], str]] = [
    # (what, --set overrides on tiny.yaml, expected substring of the one-line error)
    ("100000 actors", ["actors.num_actors=100000"],
     "actors.num_actors: (100000) must be at most 1024"),
    ("1e30 buffer bytes", [f"buffer.max_bytes={BIG}"],
     f"buffer.max_bytes: ({BIG}) must be at most 1 TiB"),
    ("1e30 as a float", ["buffer.max_bytes=1e30"],  # already: a float for an int
     "config key `buffer.max_bytes`: Expected `int`, got `float`"),
    ("1 TiB buffer on this machine", [f"buffer.max_bytes={1 << 40}", f"buffer.max_frame_bytes={1 << 26}"],
     "buffer.max_bytes: (1099511627776) is more than this machine's memory"),
    ("1 TB frames", ["buffer.max_frame_bytes=1000000000000"],
     "buffer.max_frame_bytes: (1000000000000) cannot exceed buffer.max_bytes (1073741824)"),
    ("2^70 frames", [f"buffer.max_frame_bytes={2**70}"],
     f"buffer.max_frame_bytes: ({2**70}) cannot exceed buffer.max_bytes"),
    ("unknown env", ["env.name=no_such_env"],  # already: env preflight
     "env.name: unknown env 'no_such_env'"),
    ("typo inside env.args", ["env.args={num_opz: 2}"],  # already: env preflight
     "unknown config key `env.args.num_opz`"),
    ("AdamW beta above 1", ["learner.betas=[0.9, 1.5]"],
     "learner.betas: [0.9, 1.5] must each be in [0, 1)"),
    ("a CUDA device this machine lacks", ["learner.device=cuda:99"],
     "learner.device: 'cuda:99' needs 100 CUDA device(s); this machine has"),
    ("not a torch device", ["learner.device=gpu0"],
     "learner.device: 'gpu0' must be auto, cpu, cuda or cuda:N"),
    ("a device Ray hides", ["learner.device=cuda:1", "learner.num_gpus=1"],
     "learner.device: 'cuda:1': Ray shows the learner only its learner.num_gpus (1) GPU(s)"),
    ("1e30 learner seed", [f"learner.seed={BIG}"],
     f"learner.seed: ({BIG}) must be in [0, 2**32)"),
    ("actor seeds past 2^32", [f"actors.seed={(1 << 32) - 1}"],
     "actors.seed: actors.seed + actors.num_actors - 1 = 4294967296 must be in [0, 2**32)"),
    ("1e30 buffer seed", [f"buffer.seed={BIG}"], "buffer.seed: ("),
    ("negative launch seed", ["launch.seed=-1"], "launch.seed: (-1) must be in [0, 2**32)"),
    ("a batch the buffer cannot hold", ["algorithm.batch_groups=1000000"],
     "algorithm.batch_groups: (1000000) groups of algorithm.group_size (2) episodes can take "
     "13.6 GiB in the buffer (env.max_turns 2 steps of up to model.max_model_len 512 tokens, "
     "7312 B an episode), more than buffer.max_bytes (1 GiB): the buffer would stop granting "
     "credits before a batch is complete; at most 73423 groups fit"),
    ("a micro-batch budget below the longest sequence", ["learner.micro_batch_tokens=256"],
     "learner.micro_batch_tokens: (256) is below model.max_model_len (512), the longest "
     "sequence the learner may train"),
    ("fewer CPUs than processes", ["launch.num_cpus=1"],
     "launch.num_cpus: (1) is fewer than the run's processes reserve: learner.world_size × "
     "learner.num_cpus (1 × 1) + actors.num_actors × actors.num_cpus (2 × 1) + 0.5 (buffer) "
     "= 3.5; Ray would never place them all: set at least 4"),
    ("GPUs this machine lacks", ["learner.num_gpus=64", "learner.device=cpu"],
     "learner.num_gpus: the processes reserve learner.world_size × learner.num_gpus + "
     "actors.num_actors × actors.num_gpus = 64 GPUs; this machine has"),
    ("run_root under a file", ["launch.run_root=FILE/runs"], "launch.run_root: "),
]


def fail_early(overrides: list[str], path: Path = TINY) -> str:
    """Load and preflight as `launch` does before Ray; the ConfigError's message."""
    from agent_r1_async.run.preflight.checks import preflight

    with pytest.raises(ConfigError) as info:
        preflight(load_config(path, overrides))
    return str(info.value)


@pytest.mark.parametrize(("what", "overrides", "message"), CASES, ids=[c[0] for c in CASES])
def test_unrunnable_config_fails_before_ray(tmp_path: Path, what: str, overrides: list[str],
                                            message: str) -> None:
    if what == "1 TiB buffer on this machine" and _physical_memory() >= 1 << 40:
        pytest.skip("this machine has 1 TiB of memory")
    (tmp_path / "FILE").write_text("a file, not a directory")
    overrides = [o.replace("FILE", str(tmp_path / "FILE")) for o in overrides]
    ray_before = "ray" in sys.modules
    got = fail_early(overrides + [f"launch.run_root={tmp_path / 'runs'}"] * ("run_root" not in what))
    assert message in got, f"{what}: {got}"
    assert "\n" not in got
    key = next(w.strip("`():") for w in got.split() if w.strip("`():").startswith(SECTIONS))
    assert key.startswith(overrides[0].split("=")[0]), got  # the key set first is named
    if "run_root" in what:
        assert f"'{tmp_path / 'FILE'}' is a file, not a directory" in got
    if not ray_before:
        assert "ray" not in sys.modules


def test_the_batch_bound_is_what_the_buffer_counts_for_a_longest_episode() -> None:
    from agent_r1_async.buffers.assembly import approx_nbytes, max_episode_nbytes
    from agent_r1_async.wire.messages import EpisodeEnd, LogProbs, StepRecord, TokenIds

    step = StepRecord("e", "g", "t", "a", "env", 0, TokenIds(range(496)), TokenIds(range(16)),
                      LogProbs([-1.0] * 16), 0, token_versions=list(range(16)))
    end = EpisodeEnd("e", "g", "t", "a", "env", 2, 1.0, "ok", 2)
    assert max_episode_nbytes(2, 512, 16) == 2 * approx_nbytes(step) + approx_nbytes(end) == 7312


def test_empty_config_file_is_refused_and_says_how_to_get_the_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# all commented out\n")
    with pytest.raises(ConfigError) as info:
        load_config(empty)
    assert str(info.value) == (
        f"config file '{empty}' is empty: for the built-in defaults write `{{}}` in it "
        "(or give no --config for configs/default.yaml)")
    empty.write_text("{}\n")  # the explicit way to ask for the built-in defaults
    assert load_config(empty).actors.num_actors == 1


def test_every_shipped_config_is_feasible_here() -> None:
    from agent_r1_async.run.preflight.feasibility import check_feasible

    for path in sorted((REPO / "configs").glob("*.yaml")):
        if path.name.startswith("gpu_"):  # GPU machines: tests/unit/test_gpu_configs.py
            continue
        check_feasible(load_config(path, ["launch.run_root=/tmp"]))


def test_launch_stops_at_the_feasibility_check(tmp_path: Path) -> None:
    from agent_r1_async.run.launch import launch

    cfg = load_config(TINY, ["launch.num_cpus=1", f"launch.run_root={tmp_path / 'runs'}"])
    ray_before = "ray" in sys.modules
    with pytest.raises(ConfigError, match=r"^launch\.num_cpus: "):
        launch(cfg)
    assert not (tmp_path / "runs").exists()
    if not ray_before:
        assert "ray" not in sys.modules


@pytest.mark.parametrize(("yaml_text", "overrides", "key"), [
    ("learner:\n  betas: [0.9, 1.5]\n", [], "config error: learner.betas: "),  # at load
    ("", ["launch.num_cpus=1"], "config error: launch.num_cpus: "),  # in preflight (tiny.yaml)
    ("", [], "bad.yaml' is empty"),  # an empty --config
    ("buffer: [unclosed\n", [], "bad.yaml: not valid YAML: "),  # PyYAML's message spans lines
], ids=["at load", "in preflight", "empty file", "invalid YAML"])
def test_cli_prints_one_line_and_exits_2_without_ray(tmp_path: Path, yaml_text: str,
                                                     overrides: list[str], key: str) -> None:
    # A `ray` package that kills the process on import shadows the real one: had the CLI
    # imported Ray (let alone started it) the exit code would be 99, not 2.
    (tmp_path / "noray" / "ray").mkdir(parents=True)
    (tmp_path / "noray" / "ray" / "__init__.py").write_text("import os\nos._exit(99)\n")
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    if overrides:
        config = TINY
    sets = [a for o in [*overrides, f"launch.run_root={tmp_path / 'runs'}"] for a in ("--set", o)]
    env = {"PYTHONPATH": f"{tmp_path / 'noray'}:{REPO}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "agent_r1_async.cli", "launch", "--config",
                          str(config), *sets], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("agent-r1-async: config error: ") and key in lines[0], lines[0]
    assert out.stdout == ""
    assert not (tmp_path / "runs").exists()
