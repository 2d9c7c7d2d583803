"""The helper module of rank_from_helper.py: this process's rank and the world size, from srun's variables."""

import os


def rank_and_world():
    return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
