"""Issue 26 R7: the first exercise check of a notebook starts the two engines, every later check
reuses them (the same processes) instead of starting and stopping two engines each time (14–22 s
per check before; `python -m benchmarks.engines --checks` measures it: benchmarks/README.md 7f)."""

from ddp_tutorial import exercises as ex
from ddp_tutorial import ipp


def _solved(name):
    exercise, namespace = ex.get(name), {}
    exec(exercise.solution_code("en"), namespace)
    return exercise, namespace[name]


def test_a_later_check_reuses_the_engines_the_first_started():
    ipp.stop(force=True)
    try:
        exercise, answer = _solved("mean_over_ranks")
        assert exercise.evaluate(answer).status == "correct"
        first = ipp.current()
        assert first is not None and first.size == 2            # started by the check, and kept
        pids = list(first.pids)
        for name in ("average_gradients", "evaluate_rank0"):
            exercise, answer = _solved(name)
            assert exercise.evaluate(answer).status == "correct"
            assert ipp.current() is first and list(first.pids) == pids   # the same two processes
            assert all(first.alive(rank) for rank in range(2))
    finally:
        ipp.stop(force=True)
    assert ipp.current() is None
