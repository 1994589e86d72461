"""The tiny launch on a Ray cluster of three nodes on loopback addresses (loopback_cluster.py),
each role placed by its custom resources, and each role's node lost mid-run.

- Placement: the buffer on the head (127.0.0.2), the learner and one actor on 127.0.0.3, the
  other actor on 127.0.0.4; `launch.bind_host: node` binds each socket on its own node's
  address; CurveZMQ stays on (the default), each process's keys handed over by Ray.
- Node loss (slow): the node under the actor, the buffer or the learner is SIGKILLed whole
  after the second update. The launch names the node and what ran there; the actor is
  re-placed, the buffer restarts on the surviving node from its snapshot (new endpoints that
  the learner and the actors follow; what it had received after the snapshot is counted),
  the learner restarts there from its checkpoint. Every update is logged exactly once.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.cli_runs import CLI, ROOT, cli_env
from tests.integration.loopback_cluster import LoopbackCluster
from tests.integration.test_kill_drill import _Output, _updates
from tests.integration.test_launch import _await_updates

HEAD, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"


def _config(tmp_path: Path, total: int, roles: dict[str, dict[str, float]]) -> Path:
    cfg = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    cfg["launch"].update(run_root=str(tmp_path), bind_host="node")
    cfg["learner"].update(total_updates=total, checkpoint_every=2)
    cfg["buffer"]["resources"] = roles["buffer"]
    cfg["learner"]["resources"] = roles["learner"]
    cfg["actors"]["resources"] = roles["actors"]
    cfg["eval"] = {"in_launch": False}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


ROLES = {"buffer": {"buffer": 1}, "learner": {"learner": 1}, "actors": {"actor": 1}}


@pytest.fixture
def cluster(request) -> Iterator[LoopbackCluster]:
    c = LoopbackCluster(request.param).start()
    try:
        yield c
    finally:
        c.stop()


def _launch(cluster: LoopbackCluster, config: Path) -> subprocess.Popen:
    env = cli_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=cluster.env["RAY_AUTH_TOKEN"])
    return subprocess.Popen([*CLI, "launch", "--config", str(config), "--address",
                             cluster.address], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)


def _placement(line: str) -> dict[str, str]:
    """"[launch] placement: buffer on A; learner, actor-0 on B" -> {process: address}."""
    where: dict[str, str] = {}
    for part in line.split("placement: ", 1)[1].split("; "):
        roles, ip = part.rsplit(" on ", 1)
        where.update({role: ip for role in roles.split(", ")})
    return where


def _finish(proc: subprocess.Popen, out: _Output, timeout_s: float) -> str:
    try:
        proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.text()
    assert proc.returncode == 0, text[-4000:]
    return text


THREE_NODES = [{"cpus": 1, "buffer": 1}, {"cpus": 2, "learner": 1, "actor": 1},
               {"cpus": 1, "actor": 1}]


@pytest.mark.parametrize("cluster", [THREE_NODES], indirect=True)
def test_each_role_on_its_own_node_binds_there_and_the_run_finishes(cluster, tmp_path):
    proc = _launch(cluster, _config(tmp_path, 3, ROLES))
    out = _Output(proc)
    where = _placement(out.wait_for(proc, "[launch] placement:", 0))
    text = _finish(proc, out, 400)
    assert where["buffer"] == HEAD and where["learner"] == B
    assert sorted([where["actor-0"], where["actor-1"]]) == [B, C]  # spread: one per node
    run_dir = Path(text.split("[launch] run directory: ")[-1].split()[0])
    assert _updates(run_dir / "metrics.jsonl") == [1, 2, 3]
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    # Every socket is bound on its own node's address (launch.bind_host: node).
    assert re.fullmatch(rf"tcp://{re.escape(HEAD)}:\d+", endpoints["data"])
    assert re.fullmatch(rf"tcp://{re.escape(HEAD)}:\d+", endpoints["control"])
    assert re.fullmatch(rf"tcp://{re.escape(B)}:\d+", endpoints["weights"])


def _drill(cluster: LoopbackCluster, tmp_path: Path, role: str, total: int) -> tuple[str, str]:
    """Kill the node `role` runs on after the second update; (the node, the launch's text)."""
    proc = _launch(cluster, _config(tmp_path, total, ROLES))
    out = _Output(proc)
    try:
        node = _placement(out.wait_for(proc, "[launch] placement:", 0))[role]
        metrics = _await_updates(proc, tmp_path, 2)
        mark = len(out.lines)
        cluster.kill_node(node)
        lost = out.wait_for(proc, f"[launch] node {node} lost", mark, timeout_s=120)
        assert role in lost
    except BaseException:
        proc.kill()
        raise
    text = _finish(proc, out, 600)
    (tmp_path / "launch.txt").write_text(text)  # for a post-mortem
    assert _updates(metrics) == list(range(1, total + 1))  # each update logged exactly once
    return node, text


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [[{"cpus": 2, "buffer": 1, "learner": 1},
                                      {"cpus": 2, "actor": 2}, {"cpus": 2, "actor": 2}]],
                         indirect=True)
def test_an_actors_node_lost_the_actor_is_replaced_on_another(cluster, tmp_path):
    _node, text = _drill(cluster, tmp_path, "actor-1", 8)
    assert "[launch] actor-1 died" in text and "[launch] actor-1 restarted by Ray" in text


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [[{"cpus": 1, "learner": 1},
                                      {"cpus": 3, "buffer": 1, "actor": 2},
                                      {"cpus": 3, "buffer": 1, "actor": 2}]], indirect=True)
def test_the_buffers_node_lost_it_restarts_on_another_from_its_snapshot(cluster, tmp_path):
    node, text = _drill(cluster, tmp_path, "buffer", 6)
    line = next(x for x in text.splitlines() if f"buffer lost with its node {node}" in x)
    other = C if node == B else B
    assert "restarted from its snapshot of version" in line and f"on node {other}" in line
    assert re.search(r"lost with it: \d+ records received after the snapshot", line), line


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [[{"cpus": 1, "buffer": 1},
                                      {"cpus": 3, "learner": 1, "actor": 2},
                                      {"cpus": 3, "learner": 1, "actor": 2}]], indirect=True)
def test_the_learners_node_lost_it_restarts_on_another_from_its_checkpoint(cluster, tmp_path):
    _node, text = _drill(cluster, tmp_path, "learner", 6)
    assert "[launch] learner rank 0 failed" in text
    assert "restarting the learner group (1 ranks) from" in text
