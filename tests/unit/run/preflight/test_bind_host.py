"""`launch.bind_host` refused before Ray starts (run/preflight/bind_host.py): a host this
machine cannot bind, and on a joined cluster a host no node could bind."""

from __future__ import annotations

import pytest

from agent_r1_async.config import ConfigError, RunConfig, config_from_dict
from agent_r1_async.run.preflight import bind_host
from agent_r1_async.run.preflight.feasibility import check_feasible


def _cfg(*overrides: str) -> RunConfig:
    return config_from_dict({}, ["engine.backend=vllm", "launch.run_root=/tmp", *overrides])


BIND_HINT = "use an address of one of this machine's interfaces, e.g. 127.0.0.1"
NOT_A_ZMQ_HOST = ("No such device: ZeroMQ binds an IPv4 address, an interface name, localhost "
                  "or *, not a host name or an IPv6 address")


@pytest.mark.parametrize(("host", "reason"), [
    ("203.0.113.9", "Cannot assign requested address"),  # TEST-NET-3: no interface has it
    ("not a host", NOT_A_ZMQ_HOST),
    ("::1", NOT_A_ZMQ_HOST),  # the run's ZeroMQ sockets do not enable IPv6
])
def test_a_bind_host_this_machine_cannot_bind_is_refused_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, host: str, reason: str
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg(f"launch.bind_host={host}"))
    assert str(info.value) == (
        f"launch.bind_host: cannot bind {host!r} on this machine ({reason}); {BIND_HINT}")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "0.0.0.0", "'*'", "lo"])
def test_hosts_zeromq_binds_here_pass(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    check_feasible(_cfg(f"launch.bind_host={host}"))


def test_a_joined_cluster_checks_the_bind_hosts_form_not_this_machine() -> None:
    """With --address the buffer may run on a node that has 203.0.113.9: not bound here; a
    host no node can bind (a space in it) is still refused."""
    bind_host.bind_host_bindable("203.0.113.9", joined=True)
    bind_host.bind_host_bindable("eth0", joined=True)
    check_feasible(_cfg("launch.bind_host=203.0.113.9"), address="auto")
    with pytest.raises(ConfigError) as info:
        check_feasible(_cfg("launch.bind_host=not a host"), address="auto")
    assert str(info.value) == (
        "launch.bind_host: 'not a host' cannot be bound on any node: ZeroMQ binds an IPv4 "
        "address, an interface name, localhost or * (not a DNS name nor, here, IPv6); 0.0.0.0 "
        "binds every interface")
