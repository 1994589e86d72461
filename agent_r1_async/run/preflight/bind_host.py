"""`launch.bind_host`: an address the run's ZeroMQ sockets can bind, checked before Ray starts
(feasibility.py) the way the buffer binds it; joining a cluster, only its form."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re

from agent_r1_async.config import ConfigError

_ANY_HOST = ("*", "0.0.0.0")
_ZMQ_HOSTS = "an IPv4 address, an interface name, localhost or *"
_INTERFACE_NAME = re.compile(r"[^\s/:]{1,15}")  # Linux: at most 15 bytes, no space, '/' or ':'


def bind_host_bindable(host: str, joined: bool) -> None:
    """`launch.bind_host` is where the buffer and the learner bind their ZeroMQ sockets, in
    processes Ray starts later; a host they cannot bind kills the buffer's `__init__` seconds
    after Ray starts, in a Ray error that never names the key. Checked the way they bind:
    the run's ZeroMQ transport binds a socket on `tcp://HOST:0` (any free port), closed at
    once. ZeroMQ binds an IPv4 address, an interface name, localhost or *, never a DNS name,
    and no IPv6 address (the run's sockets do not enable IPv6): a plain socket's bind would
    pass hosts the run then fails on.

    Joining a cluster (`joined`), the buffer and the learner may run on other nodes, whose
    addresses this machine need not have: the bind is skipped there and only the host's form
    is checked, which no node could bind otherwise."""
    if host in _ANY_HOST or host == "node":  # node: each process's own node's address
        return
    if joined:
        if not _bindable_form(host):
            raise ConfigError(
                f"launch.bind_host: {host!r} cannot be bound on any node: ZeroMQ binds "
                f"{_ZMQ_HOSTS} (not a DNS name nor, here, IPv6); 0.0.0.0 binds every interface")
        return
    reason = _zmq_bind_error(host)
    if reason is not None:
        raise ConfigError(
            f"launch.bind_host: cannot bind {host!r} on this machine ({reason}); use an "
            "address of one of this machine's interfaces, e.g. 127.0.0.1")


def _bindable_form(host: str) -> bool:
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    return bool(_INTERFACE_NAME.fullmatch(host))


def _zmq_bind_error(host: str) -> str | None:
    """Why the run's ZeroMQ transport cannot bind `host` here, as the buffer binds it (a PULL
    socket on `tcp_endpoint(host)`, any free port), in the OS's words; None when it can."""
    from agent_r1_async.wire.transport import tcp_endpoint
    from agent_r1_async.wire.zmq import ZmqTransport

    transport = ZmqTransport()
    try:
        transport.puller(tcp_endpoint(host)).close()
        return None
    except Exception as e:  # zmq.ZMQError: the OS's errno, libzmq's text with the address
        code = getattr(e, "errno", None)
        reason = os.strerror(code) if isinstance(code, int) and 0 < code < 1000 else (
            str(e).split(" (addr=")[0])
        if code == errno.ENODEV:
            reason += f": ZeroMQ binds {_ZMQ_HOSTS}, not a host name or an IPv6 address"
        return reason
    finally:
        transport.close()
