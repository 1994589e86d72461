"""The game of examples/openenv_guess_server.py without its server: rewards, the end, and the
oracle's binary search, which wins every secret within the guesses."""

from __future__ import annotations

import pytest

from examples.openenv_guess_server import (
    HIGH,
    LOW,
    MAX_GUESSES,
    Game,
    oracle,
    secret_for,
)


def test_a_seed_has_one_secret_in_range():
    assert secret_for(7) == secret_for(7)
    assert {secret_for(s) for s in range(400)} == set(range(LOW, HIGH + 1))


def test_rewards_for_progress_waste_and_the_secret():
    g = Game(secret=11)
    assert g.play("I guess 8") == ("Higher than 8. 4 guesses left.", 0.1, False)
    assert g.play("3") == ("Higher than 3. 3 guesses left.", -0.1, False)  # ruled out already
    assert g.play("no idea") == ("Say one number from 9 to 16. 2 guesses left.", -0.1, False)
    assert g.play("12") == ("Lower than 12. 1 guess left.", 0.1, False)
    assert g.play("11, final answer") == ("Correct! It is 11.", 1.0, True)
    assert g.solved and g.log == [8, 3, 12, 11]


def test_the_last_wrong_guess_ends_the_game_with_zero():
    g = Game(secret=5)
    for _ in range(MAX_GUESSES - 1):
        assert g.play("1")[2] is False
    assert g.play("2") == ("Higher than 2. No guesses left: it was 5.", 0.0, True)
    assert g.play("5") == ("The game is over.", 0.0, True)


@pytest.mark.parametrize("seed", range(64))
def test_the_oracle_wins_within_the_guesses(seed):
    actions = oracle({"seed": seed})
    assert 1 <= len(actions) <= MAX_GUESSES
    g = Game(secret_for(seed))
    results = [g.play(a) for a in actions]
    assert [r[2] for r in results] == [False] * (len(actions) - 1) + [True]
    assert results[-1][1] == 1.0 and all(r[1] == 0.1 for r in results[:-1])
