"""Answer rewards, checked against hand-computed SQuAD-style values."""

from __future__ import annotations

import pytest

from agent_r1_async.envs.rewards import (
    answer_in_output,
    exact_match,
    extract_answer,
    f1_score,
    format_reward,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("The Kell River!", "kell river"),
        ("  an   Apple, a day ", "apple day"),
        ("Theatre", "theatre"),  # "the" only as a whole word
        ("U.S.A.", "usa"),
        ("", ""),
    ],
)
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match():
    assert exact_match("the Kell river.", "Kell River") == 1.0
    assert exact_match("Kell", ["Kell River", "Kell"]) == 1.0  # any gold counts
    assert exact_match("Kell Riverside", "Kell River") == 0.0
    assert exact_match(None, "x") == 0.0


def test_answer_in_output_is_whole_words_after_normalization():
    assert answer_in_output("I believe it is the Kell River, near Ostrum.", "Kell River") == 1.0
    assert answer_in_output("<answer>Kell River</answer>", ["x", "kell river"]) == 1.0  # tags split
    assert answer_in_output("The Kell Riverside", "Kell River") == 0.0  # not whole words
    assert answer_in_output("founded 1204", "120") == 0.0
    assert answer_in_output("anything", "the") == 0.0  # empty once normalized
    assert answer_in_output(None, "x") == 0.0 and answer_in_output("", "x") == 0.0


def test_f1_hand_checked():
    # pred "kell river delta" vs gold "kell river": overlap 2, P = 2/3, R = 2/2,
    # F1 = 2 * (2/3) * 1 / (2/3 + 1) = (4/3) / (5/3) = 0.8
    assert f1_score("Kell River delta", "the Kell River") == pytest.approx(0.8, abs=1e-12)
    # pred "a b b" -> tokens [b, b] (article "a" dropped); gold "b c": overlap min(2,1)=1
    # P = 1/2, R = 1/2, F1 = 0.5
    assert f1_score("a b b", "b c") == pytest.approx(0.5, abs=1e-12)
    # max over golds: vs "x" 0, vs "kell" P=1/2 R=1 -> 2/3
    assert f1_score("Kell River", ["x", "Kell"]) == pytest.approx(2 / 3, abs=1e-12)
    assert f1_score("nothing shared", "Kell") == 0.0
    assert f1_score("the", "a") == 1.0  # both normalize to empty: SQuAD counts a match
    assert f1_score("the", "Kell") == 0.0
    assert f1_score(None, "Kell") == 0.0


def test_extract_answer_and_format_reward():
    assert extract_answer("think... <answer> Ostrum </answer>") == "Ostrum"
    assert extract_answer("<answer>a\nb</answer><answer>c</answer>") == "a\nb"  # the first
    assert extract_answer("no tags") is None
    assert format_reward("<answer>x</answer>") == 1.0
    assert format_reward("<answer> </answer>") == 0.0
    assert format_reward("<answer>x</answer><answer>y</answer>") == 0.0
    assert format_reward("<answer>x") == 0.0
