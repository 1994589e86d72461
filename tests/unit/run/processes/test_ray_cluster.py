"""A local Ray is private to the launch's user: a fresh token held only in the environment,
its session directory under a 0700 directory that `stop_ray` removes; a user's own token, and
a cluster's, are left as they are."""

from __future__ import annotations

import os
import re
import stat

import pytest

from agent_r1_async.run.processes import ray_cluster

_AUTH = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")


@pytest.fixture
def clean_env(monkeypatch):
    """No Ray auth variables, and whatever `set_ray_auth` writes is undone after the test
    (`delenv` of an absent key records nothing to undo: set it first)."""
    for key in _AUTH:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    return monkeypatch


def test_a_local_ray_gets_a_fresh_token_in_the_environment_only(clean_env, tmp_path):
    clean_env.setenv("HOME", str(tmp_path))
    ray_cluster.set_ray_auth(None)
    first = os.environ["RAY_AUTH_TOKEN"]
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert not (tmp_path / ".ray").exists()  # nothing written where other users could read it
    ray_cluster.set_ray_auth(None)  # a second call (start_ray after launch) keeps the token
    assert os.environ["RAY_AUTH_TOKEN"] == first


def test_a_token_the_user_set_is_kept(clean_env):
    clean_env.setenv("RAY_AUTH_TOKEN_PATH", "/secrets/ray_token")
    ray_cluster.set_ray_auth(None)
    assert "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_MODE" not in os.environ


def test_auth_turned_off_by_the_user_stays_off(clean_env):
    clean_env.setenv("RAY_AUTH_MODE", "disabled")
    ray_cluster.set_ray_auth(None)
    assert "RAY_AUTH_TOKEN" not in os.environ and os.environ["RAY_AUTH_MODE"] == "disabled"


def test_token_mode_without_a_token_still_gets_a_fresh_one(clean_env, tmp_path):
    """Ray sets RAY_AUTH_MODE=token in any process that started a local Ray; a launch from
    there must not fall back to ~/.ray/auth_token."""
    clean_env.setenv("HOME", str(tmp_path))
    clean_env.setenv("RAY_AUTH_MODE", "token")
    ray_cluster.set_ray_auth(None)
    assert re.fullmatch(r"[0-9a-f]{64}", os.environ["RAY_AUTH_TOKEN"])


def test_joining_a_cluster_sends_the_token_it_holds_and_makes_none(clean_env, tmp_path):
    clean_env.setenv("HOME", str(tmp_path))
    ray_cluster.set_ray_auth("10.0.0.5:6379")
    assert not any(k in os.environ for k in _AUTH)  # no token held: nothing to opt in to
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    ray_cluster.set_ray_auth("10.0.0.5:6379")
    assert os.environ["RAY_AUTH_MODE"] == "token" and "RAY_AUTH_TOKEN" not in os.environ


def test_the_session_directory_lives_under_a_private_directory_stop_ray_removes():
    args = ray_cluster.private_local_ray()
    assert args["_node_ip_address"] == "127.0.0.1"
    private = os.path.dirname(args["_temp_dir"])
    mode = os.stat(private)
    assert stat.S_IMODE(mode.st_mode) == 0o700 and mode.st_uid == os.getuid()
    os.makedirs(args["_temp_dir"])  # what Ray makes (0777 inside: the parent guards it)
    ray_cluster.stop_ray()
    assert not os.path.exists(private)
