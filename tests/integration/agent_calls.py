"""What the endpoint-agent tests read back: the calls their agents logged (each response's
`agent_r1` record and the text read, one JSONL file per process) and the episodes a launch's
final buffer snapshot holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def logged_calls(log_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(episode_id, step_index) -> the logged call, over every `calls-*.jsonl` in `log_dir`."""
    calls = {}
    for path in log_dir.glob("calls-*.jsonl"):
        for line in path.read_text().splitlines():
            c = json.loads(line)
            calls[c["episode_id"], c["step_index"]] = c
    return calls


def buffered_episodes(run_dir: Path, env_name: str) -> list[Any]:
    """The episodes of the run's final buffer snapshot; there are some, all of `env_name`."""
    from agent_r1_async.buffers.snapshot import load_snapshot

    state = load_snapshot(str(run_dir / "buffer"))
    assert state is not None
    episodes = [ep for s in state.stored for ep in s.group.episodes]
    assert episodes and all(s.group.env_name == env_name for s in state.stored)
    return episodes
