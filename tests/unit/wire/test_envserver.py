"""The EnvServer protocol client (wire/envserver.py) against a scripted ROUTER speaking
verifiers 0.4's frames: [client, request_id, method, msgpack] in, [client, request_id,
delta|reply, msgpack] out."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
import zmq
import zmq.asyncio

from agent_r1_async.wire.envserver import EnvServerClient, EnvServerError, EnvServerTimeout

pack = msgspec.msgpack.encode


async def serve(script: Any) -> tuple[EnvServerClient, asyncio.Task[Any], zmq.asyncio.Socket]:
    """A ROUTER on a free port running `script(router)`, and a client of it."""
    ctx = zmq.asyncio.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    task = asyncio.create_task(script(router))
    return EnvServerClient(f"tcp://127.0.0.1:{port}"), task, router


def test_a_run_returns_its_deltas_in_order_and_its_reply():
    seen: list[dict[str, Any]] = []

    async def script(router: Any) -> list[bytes]:
        client, rid, method, body = await router.recv_multipart()
        for i in range(2):
            await router.send_multipart([client, rid, b"delta", pack({"trace": "t", "i": i})])
        await router.send_multipart([client, rid, b"reply", pack({"success": True})])
        return [method, body]

    async def main() -> None:
        client, task, router = await serve(script)
        deltas, reply = await client.request("run", {"task_data": {"id": "x"}}, 5.0,
                                             on_delta=seen.append)
        method, body = await task
        assert method == b"run" and msgspec.msgpack.decode(body) == {"task_data": {"id": "x"}}
        assert deltas == [{"trace": "t", "i": 0}, {"trace": "t", "i": 1}] == seen
        assert reply == {"success": True} and client.rejected == 0
        client.close()
        router.close()

    asyncio.run(main())


def test_malformed_frames_are_rejected_and_counted_and_a_bad_body_fails_its_request():
    async def script(router: Any) -> None:
        client, rid, _, _ = await router.recv_multipart()
        await router.send_multipart([client, b"only-two"])                       # 1 frame
        await router.send_multipart([client, rid, b"gossip", pack({})])          # kind
        await router.send_multipart([client, b"nobody", b"delta", pack({})])     # no request
        await router.send_multipart([client, rid, b"delta", b"\xc1"])            # undecodable

    async def main() -> None:
        client, task, router = await serve(script)
        with pytest.raises(EnvServerError, match="the env server sent an undecodable delta"):
            await client.request("run", {}, 5.0)
        await task
        assert client.rejected == 4
        client.close()
        router.close()

    asyncio.run(main())


def test_a_run_past_its_timeout_is_cancelled_on_the_server_and_its_late_frames_are_quiet():
    async def script(router: Any) -> tuple[bytes, Any]:
        client, rid, _, _ = await router.recv_multipart()
        _, cid, method, body = await router.recv_multipart()
        # what a server does with a cancelled run: a last delta, the run's reply, the cancel's
        for frames in ([rid, b"delta", pack({"trace": "t"})], [rid, b"reply", pack({})],
                       [cid, b"reply", pack({"success": True, "cancelled": True})]):
            await router.send_multipart([client, *frames])
        return rid, (method, msgspec.msgpack.decode(body))

    async def main() -> None:
        client, task, router = await serve(script)
        with pytest.raises(EnvServerTimeout, match=r"run got no reply from tcp://127\.0\.0\.1:"
                                                   r"\d+ within 0\.3 s"):
            await client.request("run", {}, 0.3)
        rid, cancel = await asyncio.wait_for(task, 5.0)
        assert cancel == (b"cancel", {"request_id": rid.decode()})
        await asyncio.sleep(0.3)
        assert client.rejected == 0  # expected late frames, not malformed ones
        client.close()
        with pytest.raises(EnvServerError, match="is closed"):
            await client.request("health", {}, 1.0)
        router.close()

    asyncio.run(main())
