"""Every exercise of notebooks 01–06 and 08, in notebook order.

A grader takes the attendee's answer, raises :class:`~.core.Wrong` (via :func:`~.core.fail`) with
a precise message, or returns the fields of the success message. The exercises live by notebook:
:mod:`.first_steps` (01, 02), :mod:`.on_engines` (03, 04, on live engines), :mod:`.cluster` (05, 06),
:mod:`.job_script` (05), :mod:`.capstone` (08).
"""

from __future__ import annotations

from . import capstone, cluster, first_steps, job_script, on_engines
from .cluster import LOGS, SEED_SBATCH, failed_log

EXERCISES = (first_steps.EXERCISES + on_engines.EXERCISES + cluster.EXERCISES[:4] + job_script.EXERCISES
             + cluster.EXERCISES[4:] + capstone.EXERCISES)

__all__ = ["EXERCISES", "LOGS", "SEED_SBATCH", "failed_log"]
