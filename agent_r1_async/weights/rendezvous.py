"""Rendezvous and control plane of the native weight backends: one TCPStore on the learner.

Keys (all under a per-run secret `token`):
    joins                  counter; an actor takes pair number n = add(joins, 1)
    join/{n}               the actor id of pair n
    pair/{n}/init          learner → actor: vLLM `init_weight_transfer_engine` payload (JSON)
    pair/{n}/init_ack      actor → learner: "ok" or the error
    pair/{n}/offer/{k}     learner → actor: k-th update of the pair (version, checksum,
                           `update_weights` payload), JSON
    pair/{n}/ack/{k}       actor → learner: {"ok", "version", "checksum", "error"}
    pair/{n}/pg/...        the pair's gloo process group rendezvous (torch's own keys)

Security: torch's TCPStore has no authentication and no encryption. The server listens only
on `launch.bind_host` (a socket we bind ourselves and hand to TCPStore; loopback by default),
and every key lives under a 128-bit random token that reaches actors only through the
launcher (Ray, token-authenticated): a peer that can reach the port but does not know the
token cannot join a pair, read an offer or forge an ack (TCPStore cannot list keys). The
weight bytes themselves (gloo / NCCL) are neither authenticated nor encrypted: use these
backends on a trusted network, ZeroMQ with CurveZMQ otherwise.

Every wait has a timeout (`weights.timeout_s`): a missing peer is a `TimeoutError` naming
the pair and the key, never a hang.
"""

from __future__ import annotations

import datetime
import json
import socket
import time
from typing import Any

import torch.distributed as dist

from agent_r1_async.weights.seam import ChecksumMismatch

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD = ("0.0.0.0", "*", "::")


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def serve_store(bind_host: str, port: int, timeout_s: float) -> tuple[dist.TCPStore, int]:
    """A TCPStore server listening on `bind_host` only (TCPStore alone listens on every
    interface): we bind the socket and hand TCPStore its file descriptor."""
    sock = socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind_host, port))
    sock.listen(128)
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        bind_host, port, is_master=True, wait_for_workers=False, timeout=_td(timeout_s),
        master_listen_fd=sock.detach(), use_libuv=False,  # the store owns the fd now
    )
    return store, port


def connect_store(host: str, port: int, timeout_s: float) -> dist.TCPStore:
    return dist.TCPStore(host, port, is_master=False, timeout=_td(timeout_s))


def local_address_towards(host: str) -> str:
    """The address of this machine that reaches `host` (gloo binds its device to it)."""
    if host in LOOPBACK:
        return "127.0.0.1" if host == "localhost" else host
    if host in WILDCARD:  # the learner bound every interface: use this node's address
        return socket.gethostbyname(socket.gethostname())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # UDP connect sends nothing; it only picks the route
        address: str = s.getsockname()[0]
        return address


def gloo_group(
    host: str, port: int, prefix: str, rank: int, world_size: int, timeout_s: float
) -> dist.ProcessGroupGloo:
    """A gloo group of its own (never the default group: vLLM's CPU worker has one), formed
    through the learner's store under `prefix`; every collective times out after timeout_s."""
    store = dist.PrefixStore(prefix, connect_store(host, port, timeout_s))
    opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # private: not in torch's stubs
    opts._timeout = _td(timeout_s)
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=local_address_towards(host))]
    return dist.ProcessGroupGloo(store, rank, world_size, opts)


def reachable_init_info(init_info: dict[str, Any], host: str) -> dict[str, Any]:
    """The learner's init payload names the host it bound; a wildcard one (0.0.0.0) is
    replaced by the address the actor reached the learner's store at."""
    out = dict(init_info)
    for key in ("host", "master_address"):
        if out.get(key) in WILDCARD:
            out[key] = host
    return out


def parse_endpoint(endpoint: str) -> tuple[str, int, str]:
    """`tcp://host:port/token` → (host, port, token)."""
    rest = endpoint.removeprefix("tcp://")
    hostport, _, token = rest.partition("/")
    host, _, port = hostport.rpartition(":")
    if not (host and port.isdigit() and token):
        raise ValueError(f"weights endpoint {endpoint!r} is not tcp://host:port/token")
    return host.strip("[]"), int(port), token


def wait_get(store: dist.Store, key: str, timeout_s: float, what: str) -> bytes:
    """`store.get(key)` once it exists. Polls with `check` instead of `store.wait`, which
    holds the GIL while it blocks (measured: every other thread of the process stops)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while not store.check([key]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: nothing after {timeout_s:.0f} s (weights.timeout_s)")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return store.get(key)


class StorePairClient:
    """The learner's `VLLMWeightSyncClient` for one actor: vLLM's trainer engines drive the
    inference side through these four methods; here they post to the pair's keys and the
    actor (which owns its AsyncLLM) makes the calls. `stage(version, checksum)` before each
    `send_weights`."""

    def __init__(self, store: dist.Store, prefix: str, actor_id: str, timeout_s: float) -> None:
        self.store = store
        self.prefix = prefix
        self.actor_id = actor_id
        self.timeout_s = timeout_s
        self.k = 0
        self._staged: dict[str, Any] = {}
        self.last_ack: dict[str, Any] = {}

    def stage(self, version: int, checksum: str, published_at: float) -> None:
        self._staged = {"version": version, "checksum": checksum, "published_at": published_at}

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.store.set(f"{self.prefix}/init", json.dumps(init_info))
        ack = wait_get(self.store, f"{self.prefix}/init_ack", self.timeout_s,
                       f"actor {self.actor_id} never joined its weight group")
        if ack != b"ok":
            raise RuntimeError(f"actor {self.actor_id} failed to join: {ack.decode()}")

    def start_weight_update(self) -> None:
        """The actor starts the update itself when it reads the offer."""

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        """One offer to the actor. A list (one payload per worker rank) is refused: an actor's
        engine here has one worker."""
        if not isinstance(update_info, dict):
            raise TypeError(f"actor {self.actor_id}: per-rank update payloads are not supported")
        self.k += 1
        offer = {**self._staged, "update_info": {**update_info, **self._staged}}
        offer["update_info"].pop("published_at")
        self.store.set(f"{self.prefix}/offer/{self.k}", json.dumps(offer))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        raw = wait_get(self.store, f"{self.prefix}/ack/{self.k}", self.timeout_s,
                       f"actor {self.actor_id} did not acknowledge update {self.k}")
        self.last_ack = json.loads(raw)
        if self.last_ack.get("rejected"):
            raise ChecksumMismatch(f"actor {self.actor_id}: {self.last_ack.get('error')}")
        if not self.last_ack.get("ok"):
            raise RuntimeError(f"actor {self.actor_id}: {self.last_ack.get('error')}")
        if self.last_ack.get("checksum") != self._staged["checksum"]:
            raise RuntimeError(
                f"actor {self.actor_id} acknowledged checksum {self.last_ack.get('checksum')}, "
                f"sent {self._staged['checksum']}"
            )


def free_port(host: str) -> int:
    """A port free on `host` now (vLLM's NCCL trainer opens its own store on it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
