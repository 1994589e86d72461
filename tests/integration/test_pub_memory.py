"""The learner's memory is bounded against a weights subscriber that stops reading.

libzmq's SNDHWM counts whole messages, and a weights message is a whole model, so a
1,000-message mark lets one stalled peer pin ~1,000 versions (five subscribers that never read
grow the learner 733 MB -> 2.49 GB). Here a real subscriber process receives one message
and is then frozen with SIGSTOP (its TCP window closes, the worst case for the sender), and
the real `ZmqWeightSender` publishes N fresh versions of one 34 MiB tensor, zero-copy
(`copy=False`: libzmq holds each tensor's memory until it has written it out), while the
sender process's resident memory is measured.

The bound, by hand: SNDHWM = 1 message, so the subscriber's pipe holds at most 1 version and
its TCP engine at most 1 more (the one it is writing when the kernel buffers filled): at most
2 tensors stay alive, 2 x 34 MiB = 68 MiB, whatever N is. With a 1,000-message mark all N
stay alive (measured: +341 MiB for N = 10).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

import torch

from agent_r1_async.weights.zmq import ZmqWeightSender
from agent_r1_async.wire.zmq import ZmqTransport

_MIB = 1 << 20
_TENSOR_MIB = 34  # above glibc's 32 MiB mmap ceiling: freed at once, visible in RSS
_N = 10

_SUBSCRIBER = """
import sys, time
from agent_r1_async.weights.zmq import WeightSubscriber
from agent_r1_async.wire.zmq import ZmqTransport
rx = WeightSubscriber(ZmqTransport(), sys.argv[1])
while rx.poll(timeout_ms=100) is None:
    pass
print("ready", flush=True)
time.sleep(600)
"""


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / _MIB


def _settled_rss_mib() -> float:
    """RSS once libzmq's frees (pyzmq's gc thread releases zero-copy buffers) came through."""
    last = -1.0
    for _ in range(30):
        time.sleep(0.1)
        gc.collect()
        now = _rss_mib()
        if abs(now - last) < 1:
            return now
        last = now
    return last


def test_a_stalled_subscriber_pins_at_most_two_versions_in_the_sender() -> None:
    transport = ZmqTransport()
    sender = ZmqWeightSender(transport)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    child = subprocess.Popen([sys.executable, "-c", _SUBSCRIBER, sender.endpoint],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        probe = {"w": torch.zeros(4)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # slow joiner: publish until it has one
            sender.publish(0, probe)
            if child.stdout is not None and _readable(child.stdout):
                assert child.stdout.readline().strip() == "ready"
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the subscriber never received a message")
        os.kill(child.pid, signal.SIGSTOP)  # stops reading its socket: the TCP window closes
        time.sleep(0.2)
        gc.collect()
        rss0 = _rss_mib()
        for v in range(1, _N + 1):
            t = torch.full((_TENSOR_MIB * _MIB // 4,), float(v))  # a fresh version each time
            sender.publish(v, {"w": t}, copy=False)
            del t
        grew = _settled_rss_mib() - rss0
        # 2 x 34 MiB held at most, plus 16 MiB of slack for allocator and libzmq noise.
        assert grew < 2 * _TENSOR_MIB + 16, (
            f"sender RSS grew {grew:.0f} MiB: ~{grew / _TENSOR_MIB:.1f} of {_N} versions "
            "held for the stalled subscriber")
        print(f"sender RSS grew {grew:.1f} MiB for {_N} x {_TENSOR_MIB} MiB published")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        sender.close()
        transport.close()


def _readable(stream: object) -> bool:
    import select

    return bool(select.select([stream], [], [], 0)[0])
