"""A request's sampling parameters against the engine's: the distribution the learner scores
cannot be changed by a request, the token budget is capped by the engine's."""

from __future__ import annotations

import pytest

from agent_r1_async.actors.endpoint.params import (
    SAMPLING_FIELDS,
    Budget,
    EngineSampling,
    RequestError,
    check_fields,
    check_sampling,
)

ENGINE = EngineSampling(temperature=0.8, top_p=0.9, max_new_tokens=32, stop=("</answer>",))


@pytest.mark.parametrize("params, budget", [
    ({}, Budget(32)),
    ({"temperature": 0.8, "top_p": 0.9, "max_tokens": 5}, Budget(5)),
    ({"max_tokens": 500}, Budget(32, 500)),
    ({"temperature": None, "n": 1, "top_k": -1, "min_p": 0.0, "presence_penalty": 0,
      "repetition_penalty": 1.0, "logit_bias": {}, "seed": 7, "logprobs": 5}, Budget(32)),
    ({"stop": ["</answer>"]}, Budget(32)),
    ({"stop": "</answer>"}, Budget(32)),
    ({"stop": []}, Budget(32)),
])
def test_what_the_engine_honours_is_accepted(params, budget):
    assert check_sampling(params, ENGINE, "sampling_params.") == budget


@pytest.mark.parametrize("params, message", [
    ({"temperature": 1.0}, "sampling_params.temperature=1.0: the actor samples at "
                           "engine.temperature=0.8 and the learner scores the log-probs under "
                           "it; omit temperature or send 0.8"),
    ({"top_p": 1}, "sampling_params.top_p=1: the actor samples at engine.top_p=0.9"),
    ({"temperature": "0.8"}, "sampling_params.temperature='0.8'"),
    ({"n": 4}, "sampling_params.n=4 is not supported: this endpoint samples exactly as the "
               "actor's engine is configured (null or 1 only)"),
    ({"top_k": 20}, "sampling_params.top_k=20 is not supported"),
    ({"ignore_eos": True}, "sampling_params.ignore_eos=True is not supported"),
    ({"structured_outputs": {"json": {}}}, "sampling_params.structured_outputs="),
    ({"stop": ["\n"]}, "sampling_params.stop=['\\n']: the actor's engine stops at engine.stop="
                       "['</answer>'] only"),
    ({"max_tokens": 0}, "sampling_params.max_tokens=0: must be a whole number >= 1"),
    ({"max_tokens": 2.5}, "sampling_params.max_tokens=2.5: must be a whole number >= 1"),
])
def test_what_would_change_the_distribution_is_refused_naming_the_key(params, message):
    with pytest.raises(RequestError) as err:
        check_sampling(params, ENGINE, "sampling_params.")
    assert err.value.message.startswith(message) and err.value.status == 400


def test_chat_reads_max_completion_tokens_before_max_tokens():
    keys = ("max_completion_tokens", "max_tokens")
    assert check_sampling({"max_completion_tokens": 3, "max_tokens": 9}, ENGINE, "",
                          keys) == Budget(3)
    assert check_sampling({"max_tokens": 9}, ENGINE, "", keys) == Budget(9)


def test_a_budget_over_the_engines_is_capped_and_the_response_says_so():
    capped = check_sampling({"max_tokens": 10**12}, ENGINE)
    assert capped == Budget(32, 10**12)
    assert capped.note() == {"max_tokens": 32, "max_tokens_requested": 10**12}
    assert Budget(5).note() == {"max_tokens": 5}


@pytest.mark.parametrize("params, known, message", [
    ({"temprature": 0.1}, SAMPLING_FIELDS, "sampling_params.temprature: unknown field (did you "
                                           "mean sampling_params.temperature?)"),
    ({"max_tokens": 3, "frobnicate": 1}, SAMPLING_FIELDS, "sampling_params.frobnicate: unknown "
                                                          "field; "),
])
def test_an_unknown_field_is_refused_naming_it_and_its_likely_spelling(params, known, message):
    with pytest.raises(RequestError) as err:
        check_fields(params, known, "sampling_params.")
    assert err.value.message.startswith(message) and err.value.status == 400
    assert err.value.code == "unknown_field"
    check_fields({"temperature": 1, "seed": 3, "skip_special_tokens": True}, known, "")
