"""run/output/metrics.py: MetricsLogger's lines on disk as logged, its failed writes kept as one
line and never raised (a full disk simulated with /dev/full and failing file objects; W&B with a
fake module), and the update a killed launcher never logged taken from its checkpoint
(learner/checkpoint_files.py `checkpointed_update`)."""

from __future__ import annotations

import errno
import json
import os
import sys
import types
from pathlib import Path

import pytest

from agent_r1_async.config import config_from_dict
from agent_r1_async.learner.checkpoint_files import checkpointed_update
from agent_r1_async.run.output import metrics
from agent_r1_async.run.output.metrics import MetricsLogger


def _logger(run_dir: Path, wandb: str = "disabled") -> MetricsLogger:
    return MetricsLogger(config_from_dict({}, [f"logging.wandb_mode={wandb}"]), run_dir)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_logged_line_is_on_disk_before_close(tmp_path: Path):
    logger = _logger(tmp_path)
    logger.log({"version": 1, "learner/loss": 0.5}, step=1)
    with open(tmp_path / "metrics.jsonl") as other:  # another handle, the logger still open
        record = json.loads(other.read())
    assert record["update"] == 1 and record["learner/loss"] == 0.5 and record["version"] == 1
    logger.log_at_version({"eval/periodic/em": 0.25}, version=1, step=2, x_axis="eval/periodic/version")
    assert [json.loads(x)["update"] for x in _lines(tmp_path / "metrics.jsonl")] == [1, 1]
    logger.close()


def test_a_line_cut_short_earlier_is_closed_off_before_the_next(tmp_path: Path):
    (tmp_path / "metrics.jsonl").write_text('{"update": 1, "version": 1}\n{"update": 2, "ti')
    logger = _logger(tmp_path)
    logger.log({"version": 2}, step=2)
    logger.close()
    lines = _lines(tmp_path / "metrics.jsonl")
    assert lines[1] == '{"update": 2, "ti'
    assert json.loads(lines[2])["update"] == 2 and len(lines) == 3


@pytest.fixture
def no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The filesystem a failed write is on has 0 bytes free."""
    monkeypatch.setattr(metrics, "free_bytes", lambda path: 0)


def test_a_full_disk_stops_metrics_jsonl_in_one_line_and_nothing_raises(tmp_path: Path, no_room):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
    logger = _logger(tmp_path)
    logger.log({"version": 7}, step=7)
    logger.log({"version": 8}, step=8)  # the sink is off: no second failure, nothing raised
    logger.log_at_version({"eval/periodic/em": 1.0}, version=8, step=8, x_axis="eval/periodic/version")
    logger.close()
    logger.close()
    assert logger.write_failure == (
        f"disk full: {tmp_path / 'metrics.jsonl'} (0 bytes free): metrics.jsonl stopped at "
        "update 7: it and later updates are not logged there")


class _CutShort:
    """A file whose first write lands `n` bytes and whose next one fails with `err`."""

    def __init__(self, real, n: int, err: int) -> None:
        self.real, self.n, self.err, self.calls = real, n, err, 0

    def write(self, data) -> int:
        self.calls += 1
        if self.calls > 1:
            raise OSError(self.err, os.strerror(self.err))
        return self.real.write(bytes(data[:self.n]))

    def fileno(self) -> int:
        return self.real.fileno()

    def close(self) -> None:
        self.real.close()
        raise OSError(self.err, os.strerror(self.err))


def test_an_over_quota_write_leaves_no_torn_line_and_close_never_raises(tmp_path: Path, no_room):
    logger = _logger(tmp_path)
    logger.log({"version": 1}, step=1)
    sink = logger._jsonl
    assert sink is not None
    sink._file = _CutShort(sink._file, 5, errno.EDQUOT)  # type: ignore[assignment]
    logger.log({"version": 2}, step=2)  # 5 bytes land, then EDQUOT: they are cut back off
    logger.close()  # its close fails too: kept out of the way, the first failure stands
    assert [json.loads(x)["update"] for x in _lines(tmp_path / "metrics.jsonl")] == [1]
    assert logger.write_failure == (
        f"disk full: {tmp_path / 'metrics.jsonl'} (0 bytes free): metrics.jsonl stopped at "
        "update 2: it and later updates are not logged there")


def test_another_os_error_is_named_with_the_free_space(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(metrics, "free_bytes", lambda path: 10**9)
    logger = _logger(tmp_path)
    sink = logger._jsonl
    assert sink is not None
    sink._file = _CutShort(sink._file, 0, errno.EIO)  # type: ignore[assignment]
    sink._file.calls = 1  # the first write fails
    logger.log({"version": 3}, step=3)
    logger.close()
    assert logger.write_failure == (
        f"cannot write {tmp_path / 'metrics.jsonl'} (OSError: [Errno 5] Input/output error; "
        "1,000,000,000 bytes free): metrics.jsonl stopped at update 3: it and later updates "
        "are not logged there")


class _FakeRun:
    """What MetricsLogger uses of a W&B run; `fail` maps a method to the error it raises."""

    def __init__(self, root: Path, fail: dict[str, BaseException]) -> None:
        self.dir = str(root / "wandb" / "offline-run-1" / "files")
        self.url = None
        self.fail = fail
        self.logged: list[tuple[dict, int]] = []
        self.finished = 0

    def define_metric(self, *args, **kwargs) -> None:
        pass

    def log(self, record: dict, step: int) -> None:
        if "log" in self.fail:
            raise self.fail["log"]
        self.logged.append((record, step))

    def finish(self) -> None:
        self.finished += 1
        if "finish" in self.fail:
            raise self.fail["finish"]


@pytest.fixture
def fake_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A `wandb` module whose run fails as `fail` (filled in by the test) says."""
    fail: dict[str, BaseException] = {}
    runs: list[_FakeRun] = []

    def init(**kwargs) -> _FakeRun:
        runs.append(_FakeRun(Path(kwargs["dir"]), fail))
        return runs[-1]

    module = types.ModuleType("wandb")
    module.init = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", module)
    for key in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_SILENT"):
        monkeypatch.setenv(key, "")  # restored after the test, as it was ...
        monkeypatch.delenv(key)  # ... and unset during it (the logger sets its own)
    return fail, runs


def test_a_wandb_finish_on_a_full_disk_is_reported_not_raised(tmp_path: Path, fake_wandb, no_room):
    fail, runs = fake_wandb
    fail["finish"] = OSError(errno.ENOSPC, "No space left on device")
    logger = _logger(tmp_path / "run", wandb="offline")
    logger.log({"version": 1}, step=1)
    logger.close()
    wandb_dir = tmp_path / "run" / "wandb-root" / "wandb" / "offline-run-1"
    assert runs[0].finished == 1 and runs[0].logged[0][1] == 1
    assert logger.write_failure == (f"disk full: {wandb_dir} (0 bytes free): W&B could not "
                                    "finish its run: its last records may be missing there")
    assert logger.closing_lines()[0] == f"W&B run (offline): {wandb_dir}"


def test_a_failing_wandb_log_stops_wandb_only(tmp_path: Path, fake_wandb, monkeypatch):
    monkeypatch.setattr(metrics, "free_bytes", lambda path: 5 << 30)
    fail, runs = fake_wandb
    fail["log"] = RuntimeError("wandb-core: the service is gone")
    logger = _logger(tmp_path / "run", wandb="offline")
    logger.log({"version": 1}, step=1)
    logger.log({"version": 2}, step=2)
    logger.close()
    assert [json.loads(x)["update"] for x in _lines(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    assert runs[0].finished == 1  # finished once, when it failed
    wandb_dir = tmp_path / "run" / "wandb-root" / "wandb" / "offline-run-1"
    assert logger.write_failure == (
        f"cannot write {wandb_dir} (RuntimeError: wandb-core: the service is gone; "
        "5,368,709,120 bytes free): W&B stopped at step 1: it logs no more records "
        "(metrics.jsonl has them)")


def _checkpoint(run_dir: Path, version: int, last_update: dict | None) -> None:
    """A checkpoint as written before manifests (learner_state.json and dcp/: usable)."""
    ckpt = run_dir / "checkpoints" / f"step-{version}"
    (ckpt / "dcp").mkdir(parents=True)
    state = {"version": version, "updates": version, "samples_drawn": 2 * version}
    if last_update is not None:
        state["last_update"] = last_update
    (ckpt / "learner_state.json").write_text(json.dumps(state))


def _logged(run_dir: Path, *updates: int) -> None:
    with open(run_dir / "metrics.jsonl", "w") as f:
        for u in updates:
            f.write(json.dumps({"update": u, "time": 1.0, "version": u}) + "\n")


def _recover(logger: MetricsLogger, run_dir: Path) -> int | None:
    """What the launch does on opening its logger: the newest checkpoint's update record,
    logged when metrics.jsonl lacks it."""
    return logger.log_checkpointed(checkpointed_update(run_dir / "checkpoints"))


def test_the_checkpointed_update_a_killed_launcher_never_logged_is_logged_on_resume(tmp_path):
    # The launcher logged updates 1 and 2 and was killed after the learner checkpointed 3.
    _logged(tmp_path, 1, 2)
    _checkpoint(tmp_path, 3, {
        "metrics": {"version": 3.0, "loss": 0.5, "staleness_mean": 0.25, "idle_frac": 0.1},
        "staleness_hist": {"0": 10.0, "1": 30.0}})
    logger = _logger(tmp_path)
    assert _recover(logger, tmp_path) == 3
    logger.close()
    records = [json.loads(x) for x in _lines(tmp_path / "metrics.jsonl")]
    assert [r["update"] for r in records] == [1, 2, 3]
    last = records[-1]
    assert {k: v for k, v in last.items() if k != "time"} == {
        "update": 3, "version": 3.0, "learner/loss": 0.5, "staleness/mean": 0.25,
        "learner/idle_ratio": 0.1, "staleness/hist": {"bins": [0, 1], "counts": [10, 30]},
        "learner/recovered_from_checkpoint": 1.0}
    # Opened again (a second resume): update 3 is there, nothing more is written.
    again = _logger(tmp_path)
    assert _recover(again, tmp_path) is None
    again.close()
    assert len(_lines(tmp_path / "metrics.jsonl")) == 3


@pytest.mark.parametrize(("logged", "last_update"), [
    ((1, 2, 3), {"metrics": {"version": 3.0}}),  # the launcher logged it before it died
    ((1, 2), None),  # a checkpoint that keeps no update record
    ((1, 2), {"metrics": {"version": 2.0}}),  # a record of another version than the state's
])
def test_nothing_is_recovered_when_the_checkpoint_gives_no_new_record(tmp_path, logged, last_update):
    _logged(tmp_path, *logged)
    _checkpoint(tmp_path, 3, last_update)
    logger = _logger(tmp_path)
    assert _recover(logger, tmp_path) is None
    logger.close()
    assert [json.loads(x)["update"] for x in _lines(tmp_path / "metrics.jsonl")] == list(logged)


def test_the_update_a_stop_waited_for_is_logged_once_from_the_final_checkpoint(tmp_path, capsys):
    """The wall-clock budget ran out while update 3 computed: the launch stopped waiting for
    it, and its final checkpoint (step-3) waited behind it. The launch logs update 3 from that
    checkpoint, once, and goes on at version 3 (the held-out evaluation's step)."""
    from agent_r1_async.run.launch import log_checkpointed_update
    from agent_r1_async.run.output.console import Console

    _logged(tmp_path, 1, 2)
    _checkpoint(tmp_path, 3, {"metrics": {"version": 3.0, "loss": 0.25},
                              "staleness_hist": {"1": 16.0}})
    logger, console = _logger(tmp_path), Console(None, live=False)
    why = "it finished during the stop"
    assert log_checkpointed_update(logger, tmp_path, console, why) == 3
    assert log_checkpointed_update(logger, tmp_path, console, why) is None
    logger.close()
    records = [json.loads(x) for x in _lines(tmp_path / "metrics.jsonl")]
    assert [(r["update"], r.get("learner/loss")) for r in records] == [
        (1, None), (2, None), (3, 0.25)]
    assert capsys.readouterr().out.splitlines() == [
        "[launch] update 3: logged from its checkpoint (it finished during the stop)"]
