"""Every implementation of a seam, real or fake, has the seam Protocol's members with
compatible signatures.

`isinstance` with a runtime_checkable Protocol only asks whether the names exist, so a fake
whose `sample(num_groups, version)` lost a parameter would pass it. `conformance_problems`
compares each Protocol method with the implementation's through `inspect.signature`:

- same parameters, in the same order, with the same names and kinds (a positional parameter
  stays positional; `**kw` in the Protocol needs `**kw` in the implementation);
- a Protocol default is kept, with the same value; parameters the implementation adds have
  defaults (callers of the Protocol never pass them);
- annotations, where both sides have one, name the same type (module prefixes ignored; a
  bare generic such as `list` is `list[Any]` and accepts any parameterization); a returned
  Protocol may be narrowed to a class that itself conforms (ZmqTransport.puller -> ZmqPuller);
- coroutine methods stay coroutines;
- data members (`endpoint`, `version`, `pad_id`) exist on the class or are assigned on
  `self` in one of its methods (read from the source, so no instance is needed).

`test_the_check_catches_drift` keeps the checker honest: drifted copies of a fake must fail.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Protocol

import pytest

from agent_r1_async.actors.engines.base import Engine
from agent_r1_async.actors.engines.hf import HFEngine
from agent_r1_async.actors.engines.vllm import VllmEngine
from agent_r1_async.envs.base import Env, Tool
from agent_r1_async.envs.toolenv import ToolDomain, ToolEnv
from agent_r1_async.learner.protocols import SampleSource, Trainer
from agent_r1_async.learner.trainer import PolicyTrainer
from agent_r1_async.weights.seam import WeightReceiver, WeightSender
from agent_r1_async.weights.zmq import ZmqWeightReceiver, ZmqWeightSender
from agent_r1_async.wire import inproc, transport, zmq
from agent_r1_async.wire.buffer_client import BufferClient
from tests.fakes import envs
from tests.fakes.engine import FakeEngine
from tests.fakes.learner import FakeSource, RecordingSource
from tests.fakes.transport import BrokenPusher, RecordingPusher, RecordingTransport
from tests.setup_needs import require_module
from tests.unit.bench.test_smoke import load

REPO = Path(__file__).resolve().parents[2]


def _bench_sleep_trainer() -> type:
    return load("bench_async_vs_sync").SleepTrainer


# (Protocol, implementations): every real class and every fake that stands in for it.
SEAMS: list[tuple[type, list[type]]] = [
    (transport.Transport, [zmq.ZmqTransport, inproc.InProcTransport, RecordingTransport]),
    (transport.Pusher, [zmq.ZmqPusher, inproc.InProcPusher, RecordingPusher, BrokenPusher]),
    (transport.Puller, [zmq.ZmqPuller, inproc.InProcPuller]),
    (transport.Client, [zmq.ZmqClient, inproc.InProcClient]),
    (transport.Server, [zmq.ZmqServer, inproc.InProcServer]),
    (transport.Broadcaster, [zmq.ZmqBroadcaster, inproc.InProcBroadcaster]),
    (transport.Subscriber, [zmq.ZmqSubscriber, inproc.InProcSubscriber]),
    (transport.Poller, [zmq.ZmqPoller, inproc.InProcPoller]),
    (Engine, [VllmEngine, HFEngine, FakeEngine]),
    (WeightSender, [ZmqWeightSender]),
    (WeightReceiver, [ZmqWeightReceiver]),
    (SampleSource, [BufferClient, FakeSource, RecordingSource]),
    (Trainer, [PolicyTrainer, _bench_sleep_trainer()]),
    (Env, [ToolEnv, envs.ScriptedEnv, envs.HangingEnv, envs.SlowStepsEnv]),
    (ToolDomain, [envs.FakeDomain, envs.HangingDomain]),
    (Tool, [envs.EchoTool, envs.SleepTool, envs.BoomTool, envs.JunkTool, envs.LookupTool]),
]

# A Tool's `call(**arguments)` stands for the tool's own keyword parameters (validated against
# its JSON schema `parameters` before the call): only the method's presence and kind count.
OWN_PARAMETERS = {(Tool, "call")}


# ---------------------------------------------------------------------------------------
# The structural check
# ---------------------------------------------------------------------------------------


def _protocol_members(proto: type) -> tuple[dict[str, Any], set[str]]:
    methods: dict[str, Any] = {}
    attrs: set[str] = set()
    for klass in reversed(proto.__mro__):
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        attrs |= {a for a in vars(klass).get("__annotations__", {}) if not a.startswith("_")}
        methods |= {n: f for n, f in vars(klass).items()
                    if inspect.isfunction(f) and not n.startswith("_")}
    return methods, attrs


def _self_assigned(cls: type) -> set[str]:
    """Names assigned as `self.<name> = ...` in any method of `cls` or its bases."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # a builtin or C class: no source
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return names


def _has_attribute(cls: type, name: str) -> bool:
    in_class = any(name in vars(k) or name in vars(k).get("__annotations__", {})
                   for k in cls.__mro__)
    return in_class or name in _self_assigned(cls)


def _text(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return re.sub(r"\b[A-Za-z_]\w*\.(?=[A-Za-z_])", "", text).replace(" ", "")


def _same_type(proto_ann: Any, impl_ann: Any) -> bool:
    want, got = _text(proto_ann), _text(impl_ann)
    if want in (None, "Any") or got in (None, "Any"):  # unannotated is Any too
        return True
    return want == got or want.startswith(got + "[")  # bare `list` accepts `list[X]`


def _resolve(name: str | None, module_name: str) -> Any:
    module = sys.modules.get(module_name)
    return getattr(module, name, None) if name and name.isidentifier() else None


def _returns_conform(proto: type, pfn: Any, ifn: Any, seen: set) -> bool:
    want_ann = inspect.signature(pfn).return_annotation
    got_ann = inspect.signature(ifn).return_annotation
    if _same_type(want_ann, got_ann):
        return True
    want, got = _text(want_ann), _text(got_ann)
    if want == "object":  # the caller may use nothing of the result: any return conforms
        return True
    # Narrowed to a class that conforms to the returned Protocol.
    proto_ret = _resolve(want, proto.__module__)
    impl_ret = _resolve(got, ifn.__module__)
    if getattr(proto_ret, "_is_protocol", False) and isinstance(impl_ret, type):
        return not conformance_problems(impl_ret, proto_ret, seen)
    return False


def _parameter_problems(where: str, pfn: Any, ifn: Any) -> list[str]:
    problems: list[str] = []
    want = list(inspect.signature(pfn).parameters.values())[1:]  # without self
    got = list(inspect.signature(ifn).parameters.values())[1:]
    by_name = {p.name: p for p in got}
    kinds = {p.kind for p in got}
    used: set[str] = set()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for i, p in enumerate(want):
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if p.kind not in kinds:
                star = "**" if p.kind == inspect.Parameter.VAR_KEYWORD else "*"
                problems.append(f"{where}: needs {star}{p.name}")
            used |= {q.name for q in got if q.kind == p.kind}
            continue
        q = by_name.get(p.name)
        if q is None:
            problems.append(f"{where}: parameter {p.name!r} is missing")
            continue
        used.add(q.name)
        if p.kind in positional and (i >= len(got) or got[i].name != p.name):
            problems.append(f"{where}: parameter {p.name!r} is not at position {i}")
        if p.kind != q.kind and not (
            q.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
            and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.KEYWORD_ONLY)
        ):
            problems.append(f"{where}: parameter {p.name!r} is {q.kind.name}, not {p.kind.name}")
        if p.default is not inspect.Parameter.empty and q.default != p.default:
            problems.append(f"{where}: parameter {p.name!r} defaults to {q.default!r}, "
                            f"not {p.default!r}")
        if not _same_type(p.annotation, q.annotation):
            problems.append(f"{where}: parameter {p.name!r} is {_text(q.annotation)}, "
                            f"not {_text(p.annotation)}")
    for q in got:
        if (q.name not in used and q.default is inspect.Parameter.empty
                and q.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)):
            problems.append(f"{where}: extra parameter {q.name!r} has no default")
    return problems


def conformance_problems(cls: type, proto: type, seen: set | None = None) -> list[str]:
    """What keeps `cls` from satisfying `proto` (empty when it does)."""
    seen = set() if seen is None else seen
    if (cls, proto) in seen:  # a cycle of returned Protocols: assume it holds
        return []
    seen.add((cls, proto))
    methods, attrs = _protocol_members(proto)
    problems = [f"{cls.__name__}.{a}: missing attribute"
                for a in sorted(attrs) if not _has_attribute(cls, a)]
    for name, pfn in methods.items():
        where = f"{cls.__name__}.{name}"
        ifn = inspect.getattr_static(cls, name, None)
        if isinstance(ifn, staticmethod | classmethod):
            ifn = ifn.__func__
        if not inspect.isfunction(ifn):
            problems.append(f"{where}: missing method")
            continue
        if inspect.iscoroutinefunction(pfn) != inspect.iscoroutinefunction(ifn):
            problems.append(f"{where}: must {'' if inspect.iscoroutinefunction(pfn) else 'not '}"
                            "be async")
        if (proto, name) in OWN_PARAMETERS:
            continue
        problems += _parameter_problems(where, pfn, ifn)
        if not _returns_conform(proto, pfn, ifn, seen):
            problems.append(f"{where}: returns {_text(inspect.signature(ifn).return_annotation)}, "
                            f"not {_text(inspect.signature(pfn).return_annotation)}")
    return problems


# ---------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("proto", "cls"), [(p, c) for p, cs in SEAMS for c in cs],
                         ids=lambda x: x.__name__)
def test_implementation_conforms_to_its_protocol(proto: type, cls: type) -> None:
    problems = conformance_problems(cls, proto)
    assert not problems, "\n".join(problems)


def test_the_native_weight_backends_conform_to_the_channel_seam() -> None:
    """The vLLM-native backends (they import vLLM, so they are checked only where it is)."""
    require_module("vllm")
    from agent_r1_async.weights.native_receiver import NativeWeightReceiver
    from agent_r1_async.weights.native_sender import NativeWeightSender

    assert conformance_problems(NativeWeightSender, WeightSender) == []
    assert conformance_problems(NativeWeightReceiver, WeightReceiver) == []


def test_the_check_catches_drift() -> None:
    """Drifted copies of real fakes fail, each for the reason it drifted."""

    class RenamedParameter(FakeSource):
        def sample(self, num_groups: int, version: int, timeout_s: float,  # type: ignore[override]
                   failed_episodes: int = 0) -> Any:
            return super().sample(num_groups, version, timeout_s)

    class LostParameter(FakeSource):
        def sample(self, num_groups: int, learner_version: int,  # type: ignore[override]
                   failed_episodes: int = 0) -> Any:
            return super().sample(num_groups, learner_version, 0.0)

    class WrongType(FakeSource):
        def set_version(self, version: str) -> None:  # type: ignore[override]
            pass

    class NotAsync(FakeEngine):
        def close(self) -> None:  # type: ignore[override]
            pass

    class NewDefault(inproc.InProcPuller):
        def recv(self, timeout_ms: int | None = 0) -> Any:
            return super().recv(timeout_ms)

    class ExtraRequired(FakeEngine):
        async def load_weights(self, version: int, state_dict: dict, strict: bool) -> None:  # type: ignore[override]
            pass

    class NoPad:
        def needs_proximal_pass(self, epochs: int) -> bool:
            return True

    assert conformance_problems(RenamedParameter, SampleSource) == [
        "RenamedParameter.sample: parameter 'learner_version' is missing",
        "RenamedParameter.sample: extra parameter 'version' has no default",
    ]
    assert conformance_problems(LostParameter, SampleSource) == [
        "LostParameter.sample: parameter 'timeout_s' is missing",
        "LostParameter.sample: parameter 'failed_episodes' is not at position 3"]
    assert conformance_problems(WrongType, SampleSource) == [
        "WrongType.set_version: parameter 'version' is str, not int"]
    assert conformance_problems(NotAsync, Engine) == ["NotAsync.close: must be async"]
    assert conformance_problems(NewDefault, transport.Puller) == [
        "NewDefault.recv: parameter 'timeout_ms' defaults to 0, not None"]
    assert conformance_problems(ExtraRequired, Engine) == [
        "ExtraRequired.load_weights: extra parameter 'strict' has no default"]
    assert set(conformance_problems(NoPad, Trainer)) == {
        "NoPad.pad_id: missing attribute", "NoPad.publish_dtype: missing attribute",
        "NoPad.proximal_pass: missing method",
        "NoPad.optimize: missing method", "NoPad.published_state_dict: missing method"}
    # isinstance() alone passes every one of these drifted sources: names exist, that is all.
    assert isinstance(RenamedParameter(), SampleSource) and isinstance(LostParameter(), SampleSource)


def test_the_vllm_engine_module_imports_without_vllm() -> None:
    """The vLLM engine is checked above by importing its module only: that must not import
    vllm (it is imported inside the engine when it starts), or this test would need vLLM."""
    code = ("import sys, agent_r1_async.actors.engines.vllm as v; "
            "assert 'vllm' not in sys.modules, 'imported vllm'; print(v.VllmEngine.__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "VllmEngine", out.stderr[-2000:]
