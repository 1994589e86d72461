"""run/output/run_dir.py: a run directory that cannot be made is one ConfigError line naming
`launch.run_root` (the run root changed after the preflight checked it)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest

from agent_r1_async.config import ConfigError, config_from_dict
from agent_r1_async.run.output.run_dir import created_at, make_run_dir

STAMP = r"\d{8}-\d{6}"


def _cfg(run_root: Path | str):
    return config_from_dict({}, [f"launch.run_root={run_root}", "launch.name=tiny"])


def test_a_run_root_that_became_a_file_is_one_line_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("the run root was replaced by a file")
    with pytest.raises(ConfigError) as info:
        make_run_dir(_cfg(tmp_path / "runs"))
    assert re.fullmatch(
        rf"launch\.run_root: cannot make the run directory '{tmp_path}/runs/tiny-{STAMP}': "
        r"Not a directory; choose a writable directory", str(info.value)), str(info.value)


def test_a_run_root_that_cannot_be_made_names_where_it_failed() -> None:
    with pytest.raises(ConfigError) as info:
        make_run_dir(_cfg("/proc/runs"))
    assert re.fullmatch(
        rf"launch\.run_root: cannot make the run directory '/proc/runs/tiny-{STAMP}' \(at "
        r"'/proc/runs'\): (No such file or directory|Permission denied); choose a writable "
        r"directory", str(info.value)), str(info.value)


def test_a_run_directory_is_made_with_its_parts(tmp_path: Path) -> None:
    before = time.time()
    run = make_run_dir(_cfg(tmp_path / "a" / "runs"))
    after = time.time()
    assert sorted(p.name for p in run.iterdir()) == ["buffer", "checkpoints", "config.yaml", "logs"]
    assert math.floor(before) <= created_at(run) <= after  # its name's stamp, to the second
