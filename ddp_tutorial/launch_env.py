"""The ONE list of environment variables that launchers use to tell a training process where it
stands (no torch import: the launchers, the ipyparallel engines and the sbatch docs read it).

| variable | set by | meaning |
|---|---|---|
| ``RANK`` | torchrun (we export it too) | global rank, 0 … world size − 1 |
| ``LOCAL_RANK`` | torchrun | rank on this node; picks the GPU when a task sees several |
| ``WORLD_SIZE`` | torchrun | number of training processes |
| ``LOCAL_WORLD_SIZE`` | torchrun | training processes on this node |
| ``GROUP_RANK`` | torchrun | this node's number |
| ``MASTER_ADDR`` / ``MASTER_PORT`` | user, launcher | where rank 0 listens for the rendezvous |
| ``SLURM_PROCID`` | srun | the task's global number (= rank with one task per GPU) |
| ``SLURM_LOCALID`` | srun | the task's number on its node |
| ``SLURM_NTASKS`` / ``SLURM_NPROCS`` | sbatch/srun | number of tasks (NPROCS: the older name, as in the seed) |
| ``SLURM_NNODES`` / ``SLURM_JOB_NUM_NODES`` / ``SLURM_STEP_NUM_NODES`` | sbatch/srun | number of nodes |
| ``SLURM_NODEID`` | srun | this node's number in the step |
| ``SLURM_JOB_NODELIST`` / ``SLURM_NODELIST`` | sbatch | the job's hosts (``gpu[01-04]``); the first is MASTER_ADDR |
| ``SLURM_JOB_ID`` | sbatch | the job id; MASTER_PORT = 15000 + id mod 15000 |
| ``SLURM_TASKS_PER_NODE`` / ``SLURM_STEP_TASKS_PER_NODE`` | sbatch/srun | tasks per node, ``2(x3),1`` |
| ``SLURM_GPUS_PER_TASK`` | ``--gpus-per-task`` | GPUs bound to each task (each task then sees its own as device 0) |
| ``SLURM_GPUS_ON_NODE`` | ``--gres``/``--gpus`` | GPUs of the job on this node |
| ``SLURM_NTASKS_PER_NODE`` / ``SLURM_CPUS_PER_TASK`` | sbatch | tasks per node, cores per task |
| ``SLURM_STEP_ID`` / ``SLURM_STEPID`` | srun | the step's number; unset in the batch step (a forgotten srun) |
| ``CUDA_VISIBLE_DEVICES`` | SLURM (gres), the user | which GPUs this process sees, renumbered from 0 |

NCCL's own variables (``NCCL_DEBUG``, ``NCCL_SOCKET_IFNAME``) are set by the job templates
(:mod:`ddp_tutorial.slurm.render`); ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` is torch's, left at its default
(:mod:`ddp_tutorial.process_group`). Who reads the table: :mod:`ddp_tutorial.whoami`.
"""

from __future__ import annotations


# torchrun's variables (and the ones we export for libraries that read them)
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
GROUP_RANK = "GROUP_RANK"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"

# SLURM's
SLURM_PROCID = "SLURM_PROCID"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_NTASKS = "SLURM_NTASKS"
SLURM_NPROCS = "SLURM_NPROCS"
SLURM_NNODES = "SLURM_NNODES"
SLURM_JOB_NUM_NODES = "SLURM_JOB_NUM_NODES"
SLURM_STEP_NUM_NODES = "SLURM_STEP_NUM_NODES"
SLURM_NODEID = "SLURM_NODEID"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_NODELIST = "SLURM_NODELIST"
SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_TASKS_PER_NODE = "SLURM_TASKS_PER_NODE"
SLURM_STEP_TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE"
SLURM_GPUS_PER_TASK = "SLURM_GPUS_PER_TASK"
SLURM_GPUS_ON_NODE = "SLURM_GPUS_ON_NODE"
SLURM_NTASKS_PER_NODE = "SLURM_NTASKS_PER_NODE"
SLURM_CPUS_PER_TASK = "SLURM_CPUS_PER_TASK"
SLURM_STEP_ID = "SLURM_STEP_ID"  # srun's step number; unset in the batch step (the job script itself)
SLURM_STEPID = "SLURM_STEPID"    # the same, older name
