"""Checked exercises for notebooks 01–06 (``check()``, ``hint()``, ``solution()``, learntools-style).

    from ddp_tutorial import exercises as ex
    def shard_indices(num_samples, world_size, rank, seed, epoch):
        ...                      # YOUR CODE HERE
    ex.shard_indices.check()     # "not done yet" until you write it, then precisely what is wrong
    ex.shard_indices.hint()      # hint(2): more concrete
    ex.shard_indices.solution()

See :mod:`ddp_tutorial.exercises.core` for the machinery and :mod:`.catalogue` for the exercises.
Adding one touches three files: the module of its notebook (grader, solution, typical wrong answer, an
``Exercise`` entry), its ``[ex.<name>]`` table in ``messages/en.toml`` and ``tr.toml``; the notebook
source gets one line, ``=== exercise NAME``, which notebooks/build.py expands into its cells.
"""

from __future__ import annotations

from .catalogue import EXERCISES, LOGS, SEED_SBATCH, failed_log
from .core import CORRECT, NOT_DONE, PARTS, WRONG, Exercise, Outcome, WrongAnswer, is_placeholder

BY_NAME = {exercise.name: exercise for exercise in EXERCISES}
globals().update(BY_NAME)  # ex.shard_indices, ex.average_gradients, …


def get(name: str) -> Exercise:
    """The exercise whose answer is called ``name`` (``"shard_indices"``)."""
    return BY_NAME[name]


__all__ = ["EXERCISES", "LOGS", "SEED_SBATCH", "failed_log", "CORRECT", "NOT_DONE", "PARTS", "WRONG", "Exercise",
           "Outcome", "WrongAnswer", "is_placeholder", "get", *BY_NAME]
