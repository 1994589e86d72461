"""Text made one console line (run/output/lines.py)."""

from __future__ import annotations

from ray.exceptions import RayTaskError

from agent_r1_async.run.output.lines import one_line


def test_a_ray_task_error_is_told_as_the_exception_it_wraps():
    cause = TimeoutError("no batch after learner.sample_timeout_s=60.0: 0 groups ready")
    err = RayTaskError("LearnerHost.update", "Traceback ...", cause, pid=12, ip="10.0.0.1",
                       proctitle="ray::LearnerHost.update()").as_instanceof_cause()
    assert "\x1b[" in str(err)  # Ray colours its header
    assert one_line(err) == "TimeoutError: no batch after learner.sample_timeout_s=60.0: 0 groups ready"
    assert one_line(ValueError("\x1b[31mred\x1b[0m text\nmore")) == "ValueError: red text"
