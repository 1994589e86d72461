"""Test doubles, one module per seam (import the module you need; nothing is re-exported here,
so a unit test does not pay for hypothesis or a tokenizer it never uses):

    engine.py    FakeEngine: the one scripted inference engine (Engine protocol)
    envs.py      scripted envs, tools and env definitions (misbehaving on purpose)
    records.py   step records, episode ends, groups and sample batches built by hand
    learner.py   sample sources for the Learner (SampleSource protocol)
    services.py  the real BufferService for tests, a buffer in a subprocess, run configs
    checks.py    what a stream of actor records / a ledger of sampled groups must satisfy
    clock.py     a settable clock and version source
    transport.py an in-process transport that records what its pushers send (Transport)
    weights.py   a gloo weight-receiving engine that records tensors instead of loading a
                 vLLM model, and child processes that die mid-transfer
    hostile.py   hypothesis strategies for hostile frames
    bf16.py      injected micro-benchmark timings and CPU flag sets (bf16/, precision.py)

`tests/unit/test_protocols.py` checks every fake here against the Protocol it stands in for.
"""
