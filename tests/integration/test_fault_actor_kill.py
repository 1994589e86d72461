"""An actor process is SIGKILLed mid-episode; Ray restarts it and the launcher re-runs its loop.

Real parts: a Ray actor built exactly as `launch` builds it (`actor_group.ActorHost` wrapped with
`ray.remote(max_restarts=...)`, the tiny model, the transformers engine), with an env whose
episodes always take 3 steps of 0.2 s (`tests.fakes.envs.SlowStepsEnvDef`: the random tiny
model never calls a tool, so the arithmetic env would end every episode after one step and
there would be no "mid-episode" to kill),
the real `BufferService` (in this process) over ZeroMQ, and `actor_group.ActorGroup.check`,
the launcher's own restart logic. The test waits until the buffer holds accepted groups *and*
an episode of the actor that has sent steps but no end, then kills the actor's own pid.

Checked:
- Ray restarts the process, the launcher re-runs its loop, and records flow again (new
  groups accepted, fresh ActorStats: throughput recovers);
- as the launcher sees the death, the buffer reclaims what the dead process held
  (`ActorGroup.reclaim` -> `EpisodeBuffer.reclaim`), at once rather than after
  buffer.episode_timeout_s; none of its unfinished episodes is ever sampled: no partial
  episode reaches the learner, every sampled episode is whole;
- exact counts, derived from what the dead process left in the buffer (read 0.5 s after the
  kill, once the records on the wire have landed): each of its open episodes is dropped once
  (`reclaimed_episode`), each of its groups with records can no longer complete and is
  dropped once (`group_too_small`: min_group_episodes = group_size = 2), every credit it held
  counts once (`reclaimed_credit`), and nothing expires later (`expired_*` stay 0). The kill
  is timed right after a fresh grant (< 0.1 s old: a group's first record needs a generation
  and a 0.2 s env step), so at least one credit is unused;
- by ids: every group accepted before the kill is sampled, none more than max_reuse (1) times.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from agent_r1_async.buffers.service import BufferService
from agent_r1_async.config import RunConfig, config_from_dict
from agent_r1_async.wire.buffer_client import BufferClient
from agent_r1_async.wire.zmq import ZmqTransport
from tests.fakes.checks import Ledger
from tests.fakes.services import REPO, wait_for

EPISODE_TIMEOUT_S = 10.0
"""Long enough that a live episode of a loaded machine (a 2-core CI box running other
processes) never goes silent for it, so only the killed process's episodes could expire."""


def _cfg() -> RunConfig:
    return config_from_dict({
        "model": {"name_or_path": "tiny-random-llama", "max_model_len": 512},
        "engine": {"backend": "hf", "dtype": "float32", "max_new_tokens": 32},
        "env": {"name": "tests.fakes.envs:SlowStepsEnvDef", "max_turns": 3},
        "actors": {"num_actors": 1, "groups_in_flight": 2, "stats_interval_s": 0.5,
                   "max_restarts": 1, "num_cpus": 1},
        "algorithm": {"group_size": 2, "batch_groups": 1},
        "buffer": {"episode_timeout_s": EPISODE_TIMEOUT_S, "max_reuse": 1, "max_staleness": 1000,
                   "spi_tolerance": 1e6, "group_wait_s": 600, "snapshot_interval_s": 0.0},
    })


def _partial_episodes(service: BufferService, actor_id: str) -> set[str]:
    """Episodes of `actor_id` with steps in the buffer and no end record yet."""
    with service._lock:
        asm = service.buffer.assembler
        return {
            eid for grp in asm._groups.values() for eid, ep in grp.open.items()
            if ep.steps and ep.end is None and next(iter(ep.steps.values())).actor_id == actor_id
        }


def _open_episodes(service: BufferService, group_ids: set[str]) -> set[str]:
    """Every episode still open in the groups `group_ids` (an end may wait for its steps)."""
    with service._lock:
        groups = service.buffer.assembler._groups
        return {eid for gid in group_ids if gid in groups for eid in groups[gid].open}


def _stored_groups(service: BufferService) -> set[str]:
    with service._lock:
        return {e.group.group_id for e in service.buffer.store.entries()}


def _credits(service: BufferService, actor_id: str) -> tuple[set[str], set[str], float]:
    """(groups of `actor_id` with records, credits of it without one, age of the newest
    unused credit in s): what admission control holds for the actor."""
    with service._lock:
        held = {g: c for g, c in service.buffer.admission._in_flight.items()
                if c.actor_id == actor_id}
        now = service.buffer._clock()
    unused = {g: c.granted_at for g, c in held.items() if not c.started}
    newest = now - max(unused.values()) if unused else float("inf")
    return {g for g, c in held.items() if c.started}, set(unused), newest


def _group_of(service: BufferService, episode_ids: set[str]) -> set[str]:
    with service._lock:
        return {gid for gid, grp in service.buffer.assembler._groups.items()
                if episode_ids & set(grp.open)}


_KILL_DROPS = ("reclaimed_episode", "group_too_small", "reclaimed_credit", "expired_episode",
               "expired_credit")


class _Buffers:
    """`SupervisedBuffer.call` on the in-process service (the launcher calls it through Ray)."""

    def __init__(self, service: BufferService) -> None:
        self.service = service

    def call(self, method: str, *args, timeout=None, learner_version=None):
        return getattr(self.service, method)(*args)


def _actors(cfg: RunConfig, ray, actor, run_ref, endpoints, run_dir: Path,
            service: BufferService):
    """The launcher's ActorGroup, holding just this actor (its restart logic is under test)."""
    from agent_r1_async.run.output.console import Console
    from agent_r1_async.run.output.events import Events
    from agent_r1_async.run.processes.actor_group import ActorGroup
    from agent_r1_async.run.processes.liveness import Liveness
    from agent_r1_async.run.processes.nodes import NodeWatch

    group = ActorGroup.__new__(ActorGroup)
    group.cfg, group.ray, group.handles = cfg, ray, [actor]
    group.runs, group.restarts, group.endpoints = {run_ref: 0}, [0], endpoints
    group.replacing, group.discarded = {}, {}
    group.liveness = Liveness(cfg.launch.unresponsive_s)
    group.buffers, group.run_dir = _Buffers(service), run_dir
    group.events = Events(Console(run_dir / "logs", live=False), run_dir, 1, 1000)
    group.place = NodeWatch(lambda: []).place
    return group


def test_actor_killed_mid_episode_is_restarted_and_loses_nothing_accepted(tmp_path: Path) -> None:
    import ray

    from agent_r1_async.run.processes.actor_group import ActorHost

    cfg = _cfg()
    transport = ZmqTransport()
    service = BufferService(cfg.buffer, cfg.algorithm, transport)
    service.start()
    learner = BufferClient(transport, service.control_endpoint, "learner", "L", timeout_s=10.0)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": REPO}})
    try:
        endpoints = {"data": service.data_endpoint, "control": service.control_endpoint,
                     "weights": None}
        actor = ray.remote(num_cpus=1, max_restarts=cfg.actors.max_restarts, max_concurrency=2)(
            ActorHost).remote(cfg, "actor-0", endpoints, None)
        actors = _actors(cfg, ray, actor, actor.run.remote(), endpoints, tmp_path, service)
        first_pid = ray.get(actor.pid.remote(), timeout=60)

        # Kill when accepted groups exist, an episode is half sent and a credit was just
        # granted (its group cannot have sent a record yet).
        wait_for(lambda: len(_stored_groups(service)) >= 2 and _partial_episodes(service, "actor-0")
                 and _credits(service, "actor-0")[2] < 0.1,
                 120, "accepted groups, a half-sent episode and a fresh credit")
        os.kill(first_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        time.sleep(0.5)  # records already on the wire land (an end record may complete one)
        partial = _partial_episodes(service, "actor-0")  # what the dead process left half-sent
        assert partial, "every half-sent episode completed from records already on the wire"
        started, unused, _ = _credits(service, "actor-0")
        assert _group_of(service, partial) <= started and unused
        expected = {"reclaimed_episode": len(_open_episodes(service, started)),
                    "group_too_small": len(started), "reclaimed_credit": len(started | unused),
                    "expired_episode": 0, "expired_credit": 0}
        at_kill = {k: service.metrics().drops.get(k, 0) for k in _KILL_DROPS}
        accepted_before = _stored_groups(service)

        wait_for(lambda: (actors.check(0), actors.restarts[0] == 1)[1], 120, "loop re-run")
        assert ray.get(actor.pid.remote(), timeout=60) != first_pid  # a new process
        at_rerun = _stored_groups(service)
        wait_for(lambda: len(_stored_groups(service) - at_rerun) >= 2, 120,
                 "groups from the restarted actor")
        recovered_s = time.monotonic() - killed_at

        def kill_drops() -> dict[str, int]:
            drops = service.metrics().drops
            return {k: drops.get(k, 0) - at_kill[k] for k in _KILL_DROPS}

        after_kill = kill_drops()  # reclaimed as the death was seen, before the loop re-ran
        time.sleep(EPISODE_TIMEOUT_S + 1)  # nothing of it expires later: the counts are exact
        assert kill_drops() == after_kill

        def reporting() -> bool:  # ActorStats of the new process: it counts from zero again
            stats = service.metrics().actors.get("actor-0")  # the old one's was reclaimed
            return stats is not None and stats.episodes_done > 0 and stats.tokens_per_s > 0

        wait_for(reporting, 30, "throughput reported by the restarted actor")
        ray.get(actor.stop.remote(), timeout=30)
        assert ray.get(list(actors.runs), timeout=60) == ["actor-0"]  # the loop ended normally
        time.sleep(0.5)  # the last records land

        learner.connect()
        ledger = Ledger.empty()
        stored = len(_stored_groups(service))
        ledger.add(learner.sample(stored, learner_version=0, timeout_s=5.0))
        assert not learner.sample(1, learner_version=0, timeout_s=0.2).ready  # reuse cap: 1
    finally:
        learner.close()
        ray.shutdown()
        service.stop()
        transport.close()

    assert partial and not partial & set(ledger.sampled)  # no partial episode was sampled
    assert after_kill == expected
    assert accepted_before <= set(ledger.groups)  # nothing accepted was lost
    assert set(ledger.groups.values()) == {1} and set(ledger.sampled.values()) == {1}
    print(f"kill -> 2 new groups accepted in {recovered_s:.1f} s; drops caused by the kill "
          f"{after_kill}")
