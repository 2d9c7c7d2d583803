"""Checked exercises for notebooks 01–06 (``check()``, ``hint()``, ``solution()``, learntools-style).

    from ddp_tutorial import exercises as ex
    def shard_indices(num_samples, world_size, rank, seed, epoch):
        ...                      # YOUR CODE HERE
    ex.shard_indices.check()     # "not done yet" until you write it, then precisely what is wrong
    ex.shard_indices.hint()      # hint(2): more concrete
    ex.shard_indices.solution()

See :mod:`ddp_tutorial.exercises.core` for the machinery and :mod:`.catalogue` for the exercises.
"""

from __future__ import annotations

from .catalogue import EXERCISES, LOGS, SEED_SBATCH, failed_log
from .core import CORRECT, NOT_DONE, WRONG, Exercise, Outcome, is_placeholder

BY_NAME = {exercise.name: exercise for exercise in EXERCISES}
globals().update(BY_NAME)  # ex.shard_indices, ex.average_gradients, …


def get(name: str) -> Exercise:
    """The exercise whose answer is called ``name`` (``"shard_indices"``)."""
    return BY_NAME[name]


def of_notebook(prefix: str) -> list:
    """The exercises of one notebook (``"02"``)."""
    return [exercise for exercise in EXERCISES if exercise.notebook == prefix]


__all__ = ["EXERCISES", "LOGS", "SEED_SBATCH", "failed_log", "CORRECT", "NOT_DONE", "WRONG", "Exercise",
           "Outcome", "is_placeholder", "get", "of_notebook", *BY_NAME]
