"""learner/memory_savers.py: glibc's mmap threshold pinned, freed tensors leave the process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent_r1_async.learner import memory_savers

_RSS_MIB = """if True:
    def rss():  # this process's resident memory, MiB
        return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
"""
"""Prepended to the snippets below, each run in a fresh process."""


@pytest.mark.skipif(memory_savers._glibc() is None, reason="not glibc")
def test_a_freed_tensor_above_the_threshold_is_returned_whichever_thread_frees_it():
    """With the threshold at 1 MiB, 40 tensors of 8 MiB (320 MiB), allocated on one thread
    and freed on another, leave the process when freed. With glibc's default, the
    free of one 8 MiB tensor raises the threshold above 8 MiB and the 320 MiB stay resident in
    the thread's arena (measured: +320 MiB after the free; malloc_trim: +8 MiB).

    In a process of its own: in pytest's, threads of earlier tests allocate meanwhile (CI
    once saw only 248 of the 320 MiB leave), and the threshold would stay pinned for the
    tests after it."""
    code = _RSS_MIB + """if True:
        import sys
        import threading
        import torch
        from agent_r1_async.learner import memory_savers
        configured = memory_savers.configure_malloc(1 << 20) if sys.argv[1] == "pin" else False
        x = torch.ones(2 << 20)
        del x  # what raises glibc's adaptive threshold
        held = []
        def alloc():
            held.extend(torch.ones(2 << 20) for _ in range(40))  # 8 MiB each, touched
        t = threading.Thread(target=alloc)
        t.start()
        t.join()
        allocated = rss()
        held.clear()
        print(configured, allocated - rss())
    """
    returned = {}
    for threshold in (True, False):
        out = subprocess.run([sys.executable, "-c", code, "pin" if threshold else "default"],
                             capture_output=True, text=True, check=True, timeout=120)
        configured, freed_mib = out.stdout.split()
        assert configured == str(threshold)
        returned[threshold] = int(freed_mib)
    assert returned[True] >= 312  # the 320 MiB left the process (8 MiB: page rounding, slack)
    assert returned[False] < 64  # glibc's default keeps them in the thread's arena


def test_the_threshold_is_not_set_for_zero():
    """0 = glibc's own adaptive threshold (`learner.malloc_mmap_threshold_kb: 0`)."""
    assert not memory_savers.configure_malloc(0)


def test_the_jemalloc_environment_starts_a_process_on_jemalloc():
    """`learner.allocator: jemalloc`: a process started with `allocator_env` (as `launch`
    starts a learner rank, through Ray's runtime_env) has Ray's libjemalloc.so mapped, with
    purging off; glibc: no environment at all."""
    assert memory_savers.allocator_env("glibc") == {}
    env = memory_savers.allocator_env("jemalloc")
    if memory_savers.jemalloc_path() is None:
        pytest.skip("this ray package ships no libjemalloc.so")
    assert env == {"LD_PRELOAD": memory_savers.jemalloc_path(), "MALLOC_CONF": memory_savers.JEMALLOC_CONF}
    code = "print('libjemalloc' in open('/proc/self/maps').read())"
    for extra, mapped in ((env, "True"), ({}, "False")):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **extra},
                             capture_output=True, text=True, check=True, timeout=60)
        assert out.stdout.strip() == mapped


def test_release_free_memory_purges_jemalloc():
    """Under jemalloc with purging off (`JEMALLOC_CONF`) 320 MiB of freed tensors stay
    resident until `release_free_memory` purges its arenas (what `Learner.update` does at
    the end of each update)."""
    env = memory_savers.allocator_env("jemalloc")
    if not env:
        pytest.skip("this ray package ships no libjemalloc.so")
    code = _RSS_MIB + """if True:
        import torch
        from agent_r1_async.learner import memory_savers
        x = [torch.ones(2 << 20) for _ in range(40)]
        before_free = rss()
        del x
        after_free = rss()
        memory_savers.release_free_memory()
        print(before_free, after_free, rss())
    """
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, check=True, timeout=120)
    held, freed, purged = map(int, out.stdout.split())
    assert freed > held - 16  # freed, but still resident
    assert purged < freed - 300  # purged: the 320 MiB left the process


_PRIMITIVES = """if True:
    import torch
    torch.set_num_threads(1)
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    w = torch.randn(1536, 576, requires_grad=True)
    marks = {}
    for m in range(64, 384):  # 320 micro-batch lengths: a new primitive set for each
        x = torch.randn(m, 576, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.nn.functional.linear(x, w)
        y.float().sum().backward()
        if m in (224, 383):
            marks[m] = rss()
    print(marks[383] - marks[224])
"""


def test_the_learner_process_env_bounds_the_primitive_caches():
    """A learner's micro-batches change shape every update, and oneDNN / ideep keep the
    compiled primitives of each shape (1,024 each by default): resident memory grows with every
    new shape. `learner_process_env` caps both caches at 128 entries, so once 160 shapes have
    filled them, 160 more new shapes of a SmolLM2 MLP matmul (bf16 autocast, forward and
    backward) add less than a quarter of what the unbounded caches keep adding (measured
    2026-11-26: 71 vs 435 MiB). A CPU without bf16 instructions compiles no bf16 primitive
    (its bf16 is emulated outside oneDNN, and its learner runs fp32, precision.py): there the
    unbounded caches grew 5 MiB or less (2026-12-02, AVX2 only), nothing to bound."""
    from agent_r1_async.bf16.hardware import BF16_CPU_FLAGS, cpu_flags

    env = memory_savers.learner_process_env("glibc")
    assert env == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "128", "LRU_CACHE_CAPACITY": "128"}
    if memory_savers.jemalloc_path() is not None:  # with jemalloc the allocator part joins in
        full = memory_savers.learner_process_env("jemalloc")
        assert full == {**env, **memory_savers.allocator_env("jemalloc")}
    if not cpu_flags() & set(BF16_CPU_FLAGS):
        pytest.skip("no bf16 flag on this CPU: oneDNN compiles no bf16 primitive to cache")
    growth = {}
    for name, extra in (("unbounded", {}), ("bounded", env)):
        clean = {k: v for k, v in os.environ.items() if k not in env}
        out = subprocess.run([sys.executable, "-c", _PRIMITIVES], env={**clean, **extra},
                             capture_output=True, text=True, check=True, timeout=120)
        growth[name] = float(out.stdout.strip())
    assert growth["bounded"] < growth["unbounded"] / 4, growth
