"""The run-time rank check of a job that runs your own script: a script that takes its rank from the other
launcher's variables stops in seconds, with the fix named, instead of waiting for the others until the time
limit.

The hang it prevents: under ``--template torchrun`` every worker of a node inherits its srun task's
``SLURM_PROCID`` (the node's number) and ``SLURM_NTASKS`` (the number of nodes), so a script that reads them
gets two "rank 0 of 4" on the first node and no rank 3 anywhere; under ``--template per-gpu`` a script that
builds its rank from torchrun's node number ``GROUP_RANK`` (which srun does not set) takes 0 on every node.
Each such process then waits in the rendezvous for ranks that never come. ``slurm render`` refuses what its
reading of the source shows (:mod:`ddp_tutorial.script_check`); this check covers what the reading cannot
see (a rank built in a library, a config file, ``--script-convention`` forced).

How: both templates run the script through :data:`RUNNER` (``python -c "$RANK_CHECK" SCRIPT ARGS…``), which
runs it as ``python SCRIPT ARGS…`` would (``sys.argv``, ``sys.path[0]``, ``__main__``) after one change:
``torch.distributed.init_process_group`` first compares the rank and world size the script asks for (its
``rank=``/``world_size=`` arguments, or for ``env://`` the ``RANK``/``WORLD_SIZE`` it would read now) with
the launcher's own numbers, taken before the script ran: ``RANK``/``WORLD_SIZE`` of torchrun, or of srun
(per-gpu exports ``RANK=$SLURM_PROCID`` …). A rank other than the launcher's, in these templates, is a rank
that another process also claims (both number their processes node by node); a world size other than the
launcher's never fills. Then that process writes one line — what the launcher gave, what the script asked
for, which names to read or which template to render — and exits with code 2; ``--kill-on-bad-exit`` (and
torchrun's ``--max-restarts 0``) end the whole job. ``DDP_TUTORIAL_CONVENTION`` (``torchrun`` or ``slurm``)
names the convention the job meant, for the message and for any script that wants to know.
``DDP_TUTORIAL_RANK_CHECK_OFF=1`` (``slurm render --env``) turns the check off, for a script that numbers its
processes its own way on purpose.

Why this and not the alternatives: the check runs before any connection, so it answers in the time the
script takes to import torch, on every backend, and says which rank was wrong. Watching the rendezvous from
outside would need the store's key layout of one torch version (a duplicate rank overwrites, it is not
refused); a ``sitecustomize`` would reach every Python program of the job, not only the script. The patch
is made when the script imports ``torch.distributed`` (an import hook), so what the script sets before its
``import torch`` (``OMP_NUM_THREADS``, ``CUDA_VISIBLE_DEVICES``) still counts, and it acts only in the
process the launcher started: ``mp.spawn`` children (the per-node parent's) choose their own numbers.
The runner is plain Python written into the job script: the job's interpreter need not have this package.
"""

from __future__ import annotations

from typing import Optional

from .i18n import language, t

#: The rank check, run by ``python -c`` in every process of an own-script job (stdlib only, Python ≥ 3.8):
#: ``GIVEN`` holds the launcher's numbers, read before the script runs; ``init_process_group`` is wrapped
#: when ``torch.distributed`` is first imported (by the script, or by torch); ``env://`` reads RANK and
#: WORLD_SIZE when it is called, so they are read then; ``sys.argv``/``sys.path[0]`` become those of
#: ``python SCRIPT ARGS``. ``{messages}`` is filled at render time with the job's one-line messages: each
#: on its own line as a quoted string, like an echo text (the shell code is otherwise the same in every
#: language; no comment inside, since the job's comments are in its language). ``record`` writes the rank's own
#: exit code, with the time it ended, to ``$DDP_TUTORIAL_EXIT_DIR/rank-RANK`` (the job's footer reads them: the
#: first rank that failed, not srun's 143 for the ranks it stopped); a rank killed by a signal writes nothing.
RUNNER = r'''import importlib.machinery, inspect, os, runpy, sys, time
MESSAGES = {messages}
MEANT = "" if os.environ.get("DDP_TUTORIAL_RANK_CHECK_OFF") == "1" else os.environ.get("DDP_TUTORIAL_CONVENTION", "")
GIVEN = (os.environ.get("RANK"), os.environ.get("WORLD_SIZE"))
STARTER = os.getpid()


def number(value):
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return str(value)


def record(code):
    where = os.environ.get("DDP_TUTORIAL_EXIT_DIR")
    if not where or os.getpid() != STARTER:
        return
    rank = os.environ.get("RANK", "?")
    path = os.path.join(where, "rank-" + rank)
    try:
        with open(os.path.join(where, ".rank-" + rank), "w") as out:
            out.write("%d %s %d\n" % (time.time_ns(), rank, code))
        os.replace(os.path.join(where, ".rank-" + rank), path)
    except OSError:
        pass


def checked(real):
    signature = inspect.signature(real)

    def init_process_group(*args, **kwargs):
        if os.getpid() == STARTER and MEANT in MESSAGES and None not in GIVEN:
            try:
                asked = signature.bind(*args, **kwargs).arguments
            except TypeError:
                asked = {}
            rank, world = asked.get("rank", -1), asked.get("world_size", -1)
            rank = os.environ.get("RANK", "?") if rank in (None, -1) else rank
            world = os.environ.get("WORLD_SIZE", "?") if world in (None, -1) else world
            if (number(rank), number(world)) != GIVEN:
                sys.stdout.flush()
                sys.stderr.write("!! " + MESSAGES[MEANT].format(rank=rank, world=world, given_rank=GIVEN[0],
                                                                given_world=GIVEN[1]) + "\n")
                sys.stderr.flush()
                record(2)
                os._exit(2)
        return real(*args, **kwargs)

    init_process_group.__wrapped__ = real
    return init_process_group


class PatchOnImport:
    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            real = getattr(module, "init_process_group", None)
            if real is not None:
                module.init_process_group = checked(real)
                c10d = sys.modules.get("torch.distributed.distributed_c10d")
                if c10d is not None and getattr(c10d, "init_process_group", None) is real:
                    c10d.init_process_group = module.init_process_group

        spec.loader.exec_module = exec_module
        return spec


sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
sys.meta_path.insert(0, PatchOnImport())
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as stop:
    record(0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1)
    raise
except BaseException:
    record(1)
    raise
record(0)
'''

#: The message of each convention a job can mean (literal keys: grep finds every use).
_MISMATCH_KEYS = {"torchrun": "slurm_script.rank_check_torchrun", "slurm": "slurm_script.rank_check_slurm"}


def meant(template: str) -> Optional[str]:
    """The convention a template's job gives its processes: ``torchrun``, ``slurm`` (per-gpu) or None."""
    return {"torchrun": "torchrun", "per-gpu": "slurm"}.get(template)


def runner(lang: Optional[str] = None) -> str:
    """:data:`RUNNER` with the job's messages in ``lang`` (placeholders left for the run: {rank} …)."""
    lang = lang or language()
    fields = {"rank": "{rank}", "world": "{world}", "given_rank": "{given_rank}", "given_world": "{given_world}"}
    lines = []
    for convention, key in _MISMATCH_KEYS.items():
        text = t(key, lang, **fields)
        assert '"' not in text and "\\" not in text, key  # a plain quoted line (see RUNNER)
        lines += [f'    "{convention}":', f'        "{text}",']
    return RUNNER.replace("{messages}", "{\n" + "\n".join(lines) + "\n}")
