"""The feasibility preflight's refusals (run/preflight/feasibility.py): a cluster whose nodes
cannot host a role or reach loopback sockets, `learner.compile` without a C++ compiler, and a
micro-batch budget below the longest sequence. The GPU, bind-host and directory checks it runs
have their own tests (test_gpus.py, test_bind_host.py, test_directories.py)."""

from __future__ import annotations

import pytest

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict
from agent_r1_async.run.preflight import feasibility
from agent_r1_async.run.preflight.feasibility import check_feasible


def _cfg(*overrides: str) -> RunConfig:
    return config_from_dict({}, ["engine.backend=vllm", "launch.run_root=/tmp", *overrides])


def _ray_node(ip: str, alive: bool = True, **resources: float) -> dict:
    return {"NodeManagerAddress": ip, "Alive": alive,
            "Resources": {"memory": 1e9, f"node:{ip}": 1.0, **resources}}


_THREE = [_ray_node("127.0.0.2", CPU=1, buffer=1), _ray_node("127.0.0.3", CPU=2, learner=1, actor=1),
          _ray_node("127.0.0.4", CPU=1, actor=1)]
_PLACED = {"launch": {"bind_host": "node"}, "buffer": {"resources": {"buffer": 1}},
           "learner": {"resources": {"learner": 1}}, "actors": {"resources": {"actor": 1}}}


def test_a_cluster_whose_nodes_hold_each_roles_resources_fits() -> None:
    feasibility.cluster_fits(config_from_dict(_PLACED), _THREE)


def test_a_role_no_live_node_can_host_is_refused_naming_its_key_and_the_nodes() -> None:
    nodes = [*_THREE[:2], _ray_node("127.0.0.4", alive=False, CPU=1, actor=1)]
    cfg = config_from_dict({**_PLACED, "actors": {"resources": {"actor": 2}}})
    with pytest.raises(ConfigError) as e:
        feasibility.cluster_fits(cfg, nodes)
    assert str(e.value) == (
        "actors.resources: no live node of this cluster has {CPU: 1, actor: 2} for one process "
        "({actor: 2} from this key); nodes: 127.0.0.2: {CPU: 1, buffer: 1}; "
        "127.0.0.3: {CPU: 2, actor: 1, learner: 1}")


def test_a_resource_no_node_advertises_is_refused() -> None:
    cfg = config_from_dict({**_PLACED, "buffer": {"resources": {"bufer": 1}}})
    with pytest.raises(ConfigError, match=r"^buffer\.resources: no live node of this cluster "
                                          r"has \{CPU: 0\.5, bufer: 1\}"):
        feasibility.cluster_fits(cfg, _THREE)


def test_loopback_sockets_on_a_cluster_of_several_nodes_are_refused() -> None:
    cfg = config_from_dict({k: v for k, v in _PLACED.items() if k != "launch"})
    with pytest.raises(ConfigError) as e:
        feasibility.cluster_fits(cfg, _THREE)
    assert str(e.value) == (
        "launch.bind_host: '127.0.0.1' is reachable only from its own node, and this cluster "
        "has 3: use node (each process binds its own node's address) or 0.0.0.0")
    one_live = [_ray_node("127.0.0.2", CPU=4, buffer=1, learner=1, actor=1),
                _ray_node("127.0.0.3", alive=False)]
    feasibility.cluster_fits(cfg, one_live)  # one live node: loopback reaches every process


@pytest.mark.parametrize("key", ["buffer", "learner", "actors"])
@pytest.mark.parametrize(("resources", "why"), [
    ({"CPU": 1}, r"'CPU' is not a custom resource name"),
    ({"gpu_node": 0}, r"gpu_node: 0\.0 must be a positive amount"),
    ({"gpu_node": -1}, r"gpu_node: -1\.0 must be a positive amount")])
def test_a_roles_resources_must_be_custom_and_positive(key, resources, why) -> None:
    with pytest.raises(ValueError, match=rf"^{key}\.resources: {why}"):
        config_from_dict({key: {"resources": resources}})


def test_learner_compile_needs_a_cpp_compiler_on_path(monkeypatch, tmp_path):
    cfg = config_from_dict({"learner": {"compile": True}})
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no compiler at all
    with pytest.raises(ConfigError) as e:
        feasibility.compiler_present(cfg)
    assert str(e.value).startswith("learner.compile: inductor builds the learner's kernels")
    assert "(g++ c++ clang++)" in str(e.value) and "learner.compile false" in str(e.value)
    fake = tmp_path / "clang++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    feasibility.compiler_present(cfg)  # any one of them will do
    monkeypatch.setenv("CXX", "my-cxx")  # $CXX is the only one inductor then tries
    with pytest.raises(ConfigError, match=r"none is on PATH \(my-cxx\)"):
        feasibility.compiler_present(cfg)
    feasibility.compiler_present(config_from_dict({}))  # off: nothing checked


def test_a_micro_batch_budget_below_the_longest_sequence_is_refused_naming_the_keys() -> None:
    # 100 steps of a `full` context packed into one sequence: up to model.max_model_len tokens,
    # one micro-batch of its own whatever the budget.
    long = ["env.max_turns=100", "model.max_model_len=8192", "engine.max_new_tokens=48"]
    with pytest.raises(ConfigError) as e:
        check_feasible(_cfg(*long, "learner.micro_batch_tokens=4096"))
    why = str(e.value)
    assert why.startswith("learner.micro_batch_tokens: (4096) is below model.max_model_len "
                          "(8192), the longest sequence the learner may train")
    for key in ("engine.max_new_tokens 48", "env.max_turns (100)", "context.max_tokens",
                "set learner.micro_batch_tokens to at least 8192",
                "or model.max_model_len to at most 4096"):
        assert key in why, key
    assert "\n" not in why
    feasibility.sequences_fit_micro_batch(_cfg(*long, "learner.micro_batch_tokens=8192"))
    feasibility.sequences_fit_micro_batch(  # the budget, not the episode, was the trouble
        _cfg("env.max_turns=100", "model.max_model_len=4096", "learner.micro_batch_tokens=4096"))
