"""`agent-r1-async launch` end to end: tiny model, 2 actors, embedded Ray and a separate head.

These run the real console script in a subprocess (Ray, ZeroMQ, buffer, learner, HF-engine
actors, W&B offline) and check what a user would look at: the versions in metrics.jsonl,
staleness and reward metrics, the offline W&B run, the checkpoint and the plots.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.integration import wandb_offline
from tests.integration.cli_runs import CLI, ROOT, cli_env, launch_ok


def _launch(tmp_path: Path, *args: str, timeout: float = 420) -> tuple[Path, str]:
    return launch_ok("--config", str(ROOT / "configs/tiny.yaml"),
                     "--set", f"launch.run_root={tmp_path}", *args, timeout=timeout)


def _start(tmp_path: Path, *args: str) -> subprocess.Popen:
    """A tiny launch in the background (stdout and stderr together, as text)."""
    return subprocess.Popen(
        [*CLI, "launch", "--config", str(ROOT / "configs/tiny.yaml"),
         "--set", f"launch.run_root={tmp_path}", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(), cwd=ROOT,
    )


def _await_updates(proc: subprocess.Popen, tmp_path: Path, n: int, timeout_s: float = 300) -> Path:
    """The run's metrics.jsonl once it holds `n` update records (fails after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(tmp_path.glob("*/metrics.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= n:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"fewer than {n} updates within {timeout_s:.0f} s")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_launch_tiny_runs_to_the_end_and_resumes(tmp_path: Path):
    run_dir, stdout = _launch(tmp_path)
    rows = _records(run_dir)
    assert [r["update"] for r in rows] == [1, 2, 3]  # learner.total_updates: 3 in tiny.yaml
    for r in rows:
        for key in ("reward/mean", "staleness/mean", "staleness/max", "is_weight/mean",
                    "learner/loss", "buffer/groups_ready", "learner/idle_ratio",
                    "mismatch/logprob_gap_p99", "mismatch/is_weight_p99", "mismatch/guard_frac"):
            assert key in r, key
        assert 0 <= r["staleness/max"] <= 1  # tiny.yaml: buffer.max_staleness 1
        assert 0 <= r["mismatch/fresh_frac"] <= 1 and r["mismatch/logprob_gap_mean"] >= 0
        assert sum(r["staleness/hist"]["counts"]) > 0
        # steps of advantage 0 are left out (tiny.yaml's random model scores its episodes alike)
        assert 0 <= r["learner/rows_trained"] <= r["learner/rows"]
        assert (r["learner/rows_trained"] == 0) is (r["learner/zero_advantage_frac"] == 1.0)
    assert any(k.startswith("actor/actor-") for r in rows for k in r)
    wandb_runs = list((run_dir / "wandb-root" / "wandb").glob("offline-run-*"))
    assert len(wandb_runs) == 1 and any(wandb_runs[0].glob("*.wandb"))
    assert (run_dir / "plots" / "reward.png").stat().st_size > 1000
    assert (run_dir / "checkpoints" / "latest").resolve().name == "step-3"
    assert "v3 | reward" in stdout
    assert "precision: engine float32, learner " in stdout  # tiny.yaml's engine: float32
    phases = [name for name, _ in json.loads((run_dir / "startup.json").read_text())["phases"]]
    assert phases == ["preflight", "warm start", "ray", "processes", "first update"]
    _check_episode_samples(run_dir, wandb_runs[0])

    # Resume the same run with two more updates: versions continue at 4, 5.
    out = subprocess.run(
        [*CLI, "launch", "--resume", str(run_dir), "--set", "learner.total_updates=5"],
        capture_output=True, text=True, timeout=420, env=cli_env(), cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert [r["update"] for r in _records(run_dir)] == [1, 2, 3, 4, 5]
    assert (run_dir / "checkpoints" / "latest").resolve().name == "step-5"


def _check_episode_samples(run_dir: Path, wandb_run: Path) -> None:
    """tiny.yaml samples episodes at every update: RUN_DIR/episodes/update-N.jsonl, and the
    same rows in the W&B table `episodes/sample`, read back through W&B's own reader, with
    each step's policy versions and importance weights; W&B histograms of staleness and
    importance weights; the viewer prints a sampled episode turn by turn."""
    files = sorted((run_dir / "episodes").glob("update-*.jsonl"))
    assert [f.name for f in files] == ["update-1.jsonl", "update-2.jsonl", "update-3.jsonl"]
    rows = [json.loads(line) for line in files[-1].read_text().splitlines()]
    trained = [r for r in rows if r["status"] in ("ok", "truncated")]
    assert trained and {r["pick"] for r in trained} <= {"best", "worst", "canary"}
    for r in trained:
        assert r["update"] == 3 and r["versions"] and all(0 <= v <= 2 for v in r["versions"])
        assert r["staleness"] == 2 - r["versions"][0] and 0 <= r["staleness"] <= 1
        if r["advantage"] == 0.0:  # left out of the forward (learner.skip_zero_advantage)
            assert r["is_weight_mean"] is None is r["is_weight_max"]
        else:
            assert r["is_weight_mean"] > 0 and r["is_weight_min"] <= r["is_weight_max"]
        assert isinstance(r["action"], str) and r["action_tokens"] > 0

    history = wandb_offline.history(next(wandb_run.glob("*.wandb")))
    by_step = {int(h["_step"]): h for h in history}
    assert {1, 2, 3} <= set(by_step)
    trained_rows = {r["update"]: r["learner/rows_trained"] for r in _records(run_dir)}
    for step in (1, 2, 3):
        assert by_step[step]["staleness/hist._type"] == "histogram"
        # importance weights exist for the steps the learner computed
        assert (by_step[step].get("is_weight/hist._type") == "histogram") is (trained_rows[step] > 0)
    for step in (2, 3):  # each update trains new groups: lengths since the previous record
        assert by_step[step]["episodes/trained_hist._type"] == "histogram"
    table = wandb_offline.table(wandb_run / "files", by_step[3], "episodes/sample")
    assert table is not None and len(table["data"]) == len(rows)
    cells = [dict(zip(table["columns"], d, strict=True)) for d in table["data"]]
    for cell, r in zip(cells, rows, strict=True):
        assert (cell["episode_id"], cell["step"]) == (r["episode_id"], r["step"])
        assert json.loads(cell["versions"]) == r["versions"]
        assert cell["is_weight_mean"] == pytest.approx(r["is_weight_mean"]) or (
            cell["is_weight_mean"] is None is r["is_weight_mean"])
        assert cell["is_weight_max"] == pytest.approx(r["is_weight_max"]) or (
            cell["is_weight_max"] is None is r["is_weight_max"])

    shown = subprocess.run([*CLI, "episodes", str(run_dir), "--worst"], capture_output=True,
                           text=True, timeout=60, env=cli_env(), cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    worst = min(trained, key=lambda r: r["return"])
    assert shown.stdout.startswith(f"update 3 · episode {worst['episode_id']} ")
    first = next(r for r in trained if (r["episode_id"], r["step"]) == (worst["episode_id"], 0))
    assert "── step 0 · v" in shown.stdout
    assert ("IS w mean" if first["advantage"] != 0.0 else "left out (advantage 0)") in shown.stdout


@pytest.mark.slow
def test_launch_tiny_warm_start_then_rl_with_held_out_eval(tmp_path: Path):
    # A learning rate no other run uses: a fresh warm-start cache key, trained by this test
    # (and removed at the end).
    lr = f"{1e-4 * (1 + (time.time_ns() % 9973) / 10000):.8e}"
    run_dir, stdout = _launch(
        tmp_path, "--set", "launch.warm_start=true", "--set", f"sft.lr={lr}",
        "--set", "sft.num_demos=4", "--set", "sft.batch_episodes=2", "--set", "sft.epochs=1",
        "--set", "eval.in_launch=true", "--set", "eval.num_tasks=4",
        "--set", "learner.total_updates=1",
    )
    init = Path(yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["init_from"])
    entry = init.parents[1]
    try:
        assert "[launch] warm start: training" in stdout
        assert init.name == "step-2" and (entry / ".complete").exists()  # 4 demos / 2 per step
        assert entry.parent.name == "warm-start" and str(init) in stdout
        ev = json.loads((run_dir / "eval.json").read_text())
        assert ev["before"]["version"] == 0 and ev["before"]["checkpoint"] == str(init)
        assert ev["after"]["version"] == 1
        assert Path(ev["after"]["checkpoint"]).name == "step-1"
        assert ev["before"]["episodes"] == 4 == ev["after"]["episodes"]
        rows = _records(run_dir)
        assert rows[0]["update"] == 0 and "eval/before/outcome_reward" in rows[0]
        assert [r["update"] for r in rows if "reward/mean" in r] == [1]
        assert rows[-1]["update"] == 1 and "eval/after/success" in rows[-1]
        assert "eval after" in stdout and " after " in stdout.split("eval after")[-1]
    finally:
        shutil.rmtree(entry, ignore_errors=True)
        (entry.parent / f"{entry.name}.lock").unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_launch_joins_a_separate_ray_head_with_two_actors(tmp_path: Path):
    port = _free_port()
    ray_bin = str(Path(sys.executable).parent / "ray")
    # Ray's unix sockets live under --temp-dir, and AF_UNIX paths are limited to 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=4",
         "--include-dashboard=false", f"--temp-dir={ray_tmp}", "--disable-usage-stats"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(),
        start_new_session=True,  # its own process group: we end exactly what we started
    )
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            probe = subprocess.run([ray_bin, "status", f"--address={address}"],
                                   capture_output=True, text=True, env=cli_env())
            if probe.returncode == 0:
                break
            assert head.poll() is None, head.stdout.read()
            time.sleep(2)
        run_dir, _ = _launch(tmp_path, "--address", address,
                                  "--set", "actors.num_actors=2")
        rows = _records(run_dir)
        assert [r["update"] for r in rows] == [1, 2, 3]
        # Both actors contributed: each reported whole episodes (`episodes_done`, counted when
        # an episode ends). Its ActorStats travel on the same PUSH socket as its records, in
        # emit order, so the buffer had that actor's step records before the report.
        done = {a: max(r.get(f"actor/{a}/episodes_done", 0) for r in rows)
                for a in ("actor-0", "actor-1")}
        assert min(done.values()) >= 1, done
        actors = {k.split("/")[1] for r in rows for k in r if k.startswith("actor/")}
        assert actors == {"actor-0", "actor-1"}
    finally:
        with contextlib.suppress(ProcessLookupError):  # its own group: only what we started
            os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops its processes
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_sigterm_stops_a_launch_as_gracefully_as_ctrl_c(tmp_path: Path):
    """SIGTERM after the first update: exit 130 with the final checkpoint and buffer snapshot
    written (ray.init replaces the driver's SIGTERM handler; launch must take it back)."""
    proc = _start(tmp_path, "--set", "learner.total_updates=1000",
                  "--set", "learner.checkpoint_every=1000")
    try:
        metrics = _await_updates(proc, tmp_path, 1)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out[-3000:]
    assert "[launch] stopping: checkpoint and buffer snapshot" in out
    run_dir = metrics.parent
    latest = (run_dir / "checkpoints" / "latest").resolve()
    assert latest.name.startswith("step-") and int(latest.name.removeprefix("step-")) >= 1
    assert (run_dir / "buffer" / "buffer.snapshot").stat().st_size > 0
