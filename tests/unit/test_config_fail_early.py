"""Configs that cannot run fail before anything starts: at load (config.py) or in `launch`'s preflight (run/preflight/),
with a one-line `ConfigError` naming the key and what was expected, before Ray is imported.

Without these checks each case below hangs, or fails after Ray started with a traceback;
`already` marks the cases that an older check catches. Base
config: configs/tiny.yaml (learner 1 CPU, 2 actors × 1 CPU, group_size 2, max_turns 2,
max_model_len 512, max_new_tokens 16, buffer.max_bytes 1 GiB).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_r1_async.config import ConfigError, load_config
from agent_r1_async.run.preflight.memory import _physical_memory

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
