"""Exercises of notebooks 05 and 06: repairing the seed's sbatch script, MASTER_ADDR from a host
list, naming the rank that died from a job's log, the learning rate for N ranks."""

from __future__ import annotations

import math
import re
from typing import Dict, NamedTuple, Optional, Tuple

from ..i18n import TutorialError, number, t
from .core import AttendeeError, AttendeeStopped, Exercise, NotDone, WrongAnswer, call, call_for, fail, fail_type
from .guard import as_int, as_int_list, as_number, shown
from .job_shape import check_shape, read_shape, training_line


# ----------------------------------------------------------------------------------------------
# 05 · the seed's broken sbatch script, MASTER_ADDR from a host list, the rank that died

SEED_SBATCH = """#!/bin/bash
#SBATCH --account=<account> #your_user_account
#SBATCH --job-name=pytorch
#SBATCH --partition=<partition>
#SBATCH --nodes=2
#SBATCH --ntasks=2 # Number of parent processes that will be used
#SBACTH --ntasks-per-node=1 # We specify that we want a single parent process to run on each node
#SBATCH --gres=gpu:3 # number of GPUs used in each node
#SBATCH --cpus-per-task=8
#SBATCH --time=02:00:00
# Setup
module purge
module add centos7.3/lib/cuda/10.1
hostname
source /truba/home/<account>/anaconda3/bin/activate
conda init
conda activate <conda_env>
export MASTER_PORT=12900
export MASTER_ADDR=$(srun --ntasks=1 hostname 2>&1 | tail -n1)
srun -N 2 -n 2 python 01_distributed.p
"""

#: The GPUs per node the seed's script asks for (``--gres=gpu:3``).
SEED_GPUS = 3


def exercise_profile(key: str, gpus: int = 1):
    """The site profile (:data:`ddp_tutorial.slurm.PROFILES`) an exercise of 05 is written for: the session's site
    table names it (``[exercises] key``), else the partition of the day's jobs (``[day] job_partition``), else its
    first GPU partition; the first of these whose nodes have ``gpus`` GPUs (else the one with most GPUs)."""
    from .. import sites
    from ..slurm.spec import profiles
    site, known = sites.session(), profiles()
    wanted = (site.section("exercises").get(key), site.section("day").get("job_partition"), *known)
    found = [known[name] for name in wanted if name in known and known[name].gpus_per_node]
    return next((p for p in found if p.gpus_per_node >= gpus), max(found, key=lambda p: p.gpus_per_node, default=None))


PLACEHOLDER = re.compile(r"<([A-Za-z_][\w-]*)>")  # what the seed's script leaves to fill in: <account>
_OPTION = re.compile(r"^#SBATCH\s+--([a-z-]+)(?:[= ]\s*(\S+))?")


class Directives(NamedTuple):
    """A script's #SBATCH lines as sbatch reads them: only at the start of a line, and only above the first
    command (the first line that is neither blank nor a comment); every #SBATCH line below it is skipped."""

    options: Dict[str, str]                   # {option: value} of the lines sbatch reads
    first_command: Optional[Tuple[int, str]]  # (line number, line) where sbatch stops reading
    late: Optional[Tuple[int, str]]           # the first #SBATCH line below it, which sbatch skips
    indented: Optional[Tuple[int, str]]       # the first #SBATCH line with blanks before it, skipped too


def sbatch_directives(text):
    """:class:`Directives` of ``text`` (fixed_sbatch and ddp_job read them)."""
    options, first_command, late, indented = {}, None, None, None
    for number_, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if first_command is None and stripped and not stripped.startswith("#"):
            first_command = (number_, line)
        if not stripped.startswith("#SBATCH"):
            continue
        if first_command is not None:
            late = late or (number_, line)
        elif not line.startswith("#SBATCH"):
            indented = indented or (number_, line)
        else:
            match = _OPTION.match(stripped)
            if match:
                options[match.group(1)] = (match.group(2) or "").split("#")[0]
    return Directives(options, first_command, late, indented)


def read_directives(text, typo, indented, late):
    """``{option: value}`` of the #SBATCH lines sbatch reads; a misspelt ``#SBATCH``, an indented one and one
    below the first command (sbatch skips both) fail with the exercise's ``typo``, ``indented`` and ``late`` keys."""
    for number_, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if re.match(r"^#\s*S[A-Z]{3,}", stripped) and not stripped.startswith("#SBATCH "):
            fail(typo, line=number_, code=stripped[:60])
    directives = sbatch_directives(text)
    if directives.indented:
        fail(indented, line=directives.indented[0], code=directives.indented[1][:60])
    if directives.late:
        fail(late, line=directives.late[0], code=directives.late[1].strip()[:60],
             first=directives.first_command[0], command=directives.first_command[1].strip()[:60])
    return directives.options


def _grade_sbatch(text):
    if not isinstance(text, str):
        fail("ex.fixed_sbatch.type", got=type(text).__name__)
    if text.strip() == SEED_SBATCH.strip():
        raise NotDone()
    options = read_directives(text, typo="ex.fixed_sbatch.typo", indented="ex.fixed_sbatch.indented",
                              late="ex.fixed_sbatch.late_directive")
    _, launch = training_line(text)  # the shape rules both job exercises share (job_shape): srun, then the site's
    script = re.search(r"\bpython\S*\s+(\S+)", launch)
    if script is not None and not script.group(1).endswith(".py"):
        fail("ex.fixed_sbatch.script", script=script.group(1))
    port = re.search(r"^\s*export\s+MASTER_PORT=([^#\n]*)", text, re.M)
    if not port:
        fail("ex.fixed_sbatch.no_port")
    if "SLURM_JOB_ID" not in port.group(1):
        fail("ex.fixed_sbatch.port", port=port.group(1).strip())
    if not re.search(r"^\s*export\s+MASTER_ADDR=", text, re.M):
        fail("ex.fixed_sbatch.no_addr")
    for number_, line in enumerate(text.splitlines(), start=1):
        placeholder = PLACEHOLDER.search(line)
        directive = line.strip().startswith("#SBATCH")
        if placeholder and (directive or not line.strip().startswith("#")):
            fail("ex.fixed_sbatch.placeholder_directive" if directive else "ex.fixed_sbatch.placeholder",
                 line=number_, code=line.strip()[:60], name=placeholder.group(0))
    shape = read_shape(options)
    check_shape(shape)
    nodes, gpus, cpus = shape.nodes, shape.gpus_per_node or 0, shape.cpus_per_task or 1
    from ..slurm import JobSpec, validate
    try:
        per_process = max(1, cpus // max(gpus, 1))
        validate(JobSpec(template="seed", nodes=nodes, gpus_per_node=gpus, cpus_per_process=per_process,
                         job_name=options.get("job-name", "ddp-tutorial"), account=options.get("account"),
                         partition=options.get("partition"), time=options.get("time", "00:30:00")))
    except TutorialError as error:
        fail("ex.fixed_sbatch.invalid", error=str(error))
    return {"world": nodes * gpus}


_SBATCH_CODE = r'''
import re
from ddp_tutorial.exercises import SEED_SBATCH

fixed_sbatch = (SEED_SBATCH
                # ⟪1. yazım hatası: sbatch bu satırı atlıyordu‖1. the typo: sbatch skipped the line⟫
                .replace("#SBACTH", "#SBATCH")
                .replace("01_distributed.p\n", "01_distributed.py\n")   # ⟪2. gerçek dosya‖2. the real file⟫
                # ⟪3. hesabınız ve kuyruğunuz (partition)‖3. your project and partition⟫
                .replace("<account>", "my-account")
                .replace("<partition>", "@P@")
                .replace("<conda_env>", "ddp")
                # ⟪4. @P@: GPU başına @G@ CPU çekirdeği, 3 × @G@‖4. @P@: @G@ cores per GPU, 3 × @G@⟫
                .replace("--cpus-per-task=8", "--cpus-per-task=@C@"))
# ⟪5. her işe kendi portu, 12900 değil‖5. a port per job, not 12900⟫
fixed_sbatch = re.sub(r"MASTER_PORT=\d+", "MASTER_PORT=$((15000 + SLURM_JOB_ID % 15000))", fixed_sbatch)
'''


def _sbatch_code() -> str:
    """fixed_sbatch's solution with the numbers of the partition it is written for (:func:`exercise_profile`)."""
    profile = exercise_profile("fixed_sbatch_partition", SEED_GPUS)
    per_gpu = profile.cpus_per_gpu if profile else 1
    return (_SBATCH_CODE.replace("@P@", profile.partition if profile else "my-partition")
            .replace("@G@", str(per_gpu)).replace("@C@", str(SEED_GPUS * per_gpu)))


SBATCH_CODE = _sbatch_code()


def _grade_master_addr(fn):
    from ..hostlist import first_host
    for nodes in ("gpu[01-03,07],cpu5", "node007", "tesla[3-4]", "r[2-3]n[1-2]", "volta[09-11],pascal1"):
        want = first_host(nodes)
        got = call_for(f"SLURM_JOB_NODELIST='{nodes}'", fn, nodes)
        if type(got) is not str:
            fail_type(got, t("ex.want_str"))
        if got != want:
            fail("ex.master_addr.wrong", nodes=nodes, got=shown(got), want=want)
    return {}


MASTER_ADDR_CODE = r'''
def master_addr(nodelist):
    import re
    # ⟪ilk öğe: [...] dışındaki ilk virgüle kadar‖the first element: up to the first comma outside [...]⟫
    first = re.match(r"(?:[^,\[]|\[[^\]]*\])*", nodelist).group(0)
    # ⟪her [...] grubu → ilk sayısı, baştaki sıfırlar korunur‖every [...] group → its first number, zero padding kept⟫
    # ⟪örnek: gpu[01-03] → gpu01‖example: gpu[01-03] → gpu01⟫
    first_number = lambda group: re.split(r"[-,]", group.group(1))[0]  # noqa: E731
    return re.sub(r"\[([^\]]*)\]", first_number, first)
'''


# What torchrun and srun put into a training process's environment (and a half-set one).
_TORCHRUN, _SLURM = ("RANK", "LOCAL_RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")
LAUNCHES = (
    ("torchrun --nproc-per-node 4", {"RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
                                     "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                                     "TORCHELASTIC_RUN_ID": "none", "PATH": "/usr/bin"}),
    ("srun --ntasks-per-node 4 --nodes 2", {
        "SLURM_PROCID": "6", "SLURM_LOCALID": "2", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8", "SLURM_NODEID": "1",
        "SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_STEP_NUM_NODES": "2", "PATH": "/usr/bin"}),
    ("srun --ntasks-per-node 1 --nodes 2 torchrun --nproc-per-node 4", {
        "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2", "SLURM_NODEID": "1",
        "SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_TASKS_PER_NODE": "1(x2)",
        "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
        "MASTER_ADDR": "gpu01", "MASTER_PORT": "19711", "PATH": "/usr/bin"}),
    ("python train.py", {"PATH": "/usr/bin", "HOME": "/home/user"}),
    ("RANK=1 WORLD_SIZE=2 python train.py", {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                             "MASTER_PORT": "29500", "PATH": "/usr/bin"}),
    ("srun, SLURM_NTASKS lost", {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4711",
                                 "SLURM_JOB_NODELIST": "gpu[01-02]", "PATH": "/usr/bin"}),
)


def _shown(environ) -> str:
    return " ".join(f"{name}={environ[name]}" for name in (*_TORCHRUN, *_SLURM) if name in environ) or "—"


def _grade_who_am_i(fn):
    from ..whoami import resolve_environment
    for launcher, environ in LAUNCHES:
        try:
            found = resolve_environment(environ=dict(environ))
            want = (found.rank, found.local_rank, found.world_size)
        except TutorialError:
            want = None                           # the package refuses it: so must the attendee
        case = t("ex.who_am_i.case", launcher=launcher, variables=_shown(environ))
        if want is None:
            try:
                got = call(fn, dict(environ))
            except AttendeeStopped:
                raise  # stopped is not refused
            except AttendeeError:
                continue
            fail("ex.who_am_i.half", case=case, got=shown(got))
        returned = call_for(case, fn, dict(environ))
        got = as_int_list(returned)
        if got is None or len(got) != 3:
            fail("ex.who_am_i.type", got=shown(returned))
        got = tuple(got)
        if got == want:
            continue
        slurm = tuple(int(environ[name]) for name in _SLURM) if all(n in environ for n in _SLURM) else None
        if slurm is not None and got == slurm and any(name in environ for name in _TORCHRUN):
            fail("ex.who_am_i.slurm_first", case=case, got=got, want=want)
        fail("ex.who_am_i.wrong", case=case, got=got, want=want)
    return {}


WHO_AM_I_CODE = '''
def who_am_i(environ):
    torchrun = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    slurm = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")
    # ⟪önce torchrun: srun + torchrun altında ikisi de ayarlıdır‖torchrun first: under srun + torchrun both are set⟫
    for names in (torchrun, slurm):
        present = [name for name in names if environ.get(name, "") != ""]
        if present and len(present) < len(names):  # ⟪yarım ayarlı bir takım hatadır‖a half-set group is an error⟫
            raise ValueError(f"{present} ⊊ {names}")
        if present:
            return tuple(int(environ[name]) for name in names)
    return 0, 0, 1                             # ⟪başlatıcı yok: tek süreç‖no launcher: one process⟫
'''


_LOG = "\n".join((
    '+ srun torchrun --nnodes=2 --nproc-per-node={per_node} --rdzv-backend=c10d'
    ' --rdzv-endpoint={host0}:{port} train.py',
    'epoch 1 · step 120 · loss 0.4123',
    '{complaints}W1203 10:14:06.512000 {pid}'
    ' torch/distributed/elastic/multiprocessing/api.py:897] Sending process {pid2} closing signal SIGTERM',
    'E1203 10:14:07.001000 {pid} torch/distributed/elastic/multiprocessing/api.py:869]'
    ' failed (exitcode: {survivor_code}) local_rank: {survivor_local} (pid: {pid2}) of binary: /usr/bin/python',
    'Traceback (most recent call last):',
    '  File "/usr/bin/torchrun", line 8, in <module>',
    'torch.distributed.elastic.multiprocessing.errors.ChildFailedError:',
    '============================================================',
    'train.py FAILED',
    '------------------------------------------------------------',
    'Failures:',
    '[1]:',
    '  time      : 2026-12-03_10:14:07',
    '  host      : {survivor_host}',
    '  rank      : {survivor} (local_rank: {survivor_local})',
    '  exitcode  : {survivor_code} (pid: {pid2})',
    '  error_file: <N/A>',
    '  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html',
    '------------------------------------------------------------',
    'Root Cause (first observed failure):',
    '[0]:',
    '  time      : 2026-12-03_10:14:05',
    '  host      : {dead_host}',
    '  rank      : {dead} (local_rank: {dead_local})',
    '  exitcode  : {dead_code} (pid: {pid3})',
    '  error_file: <N/A>',
    '  traceback : {dead_traceback}',
    '============================================================',
    '{tail}',
))


def failed_log(dead: int, survivor: int, world: int = 4, per_node: int = 2, killed: bool = True) -> str:
    """A failed torchrun job's log (the form torchrun and srun write), in which ``dead`` died first
    and ``survivor`` failed afterwards because its peer was gone."""
    hosts = [f"gpu{node + 1:02d}" for node in range(world // per_node)]
    complaints = "".join(
        f"[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
        f"peer [10.0.0.{12 + dead // per_node}]:{41000 + r}\n" for r in range(world) if r != dead)
    return _LOG.format(
        per_node=per_node, host0=hosts[0], port=29500, complaints=complaints, pid=4100, pid2=4200 + survivor,
        pid3=4200 + dead, survivor=survivor, survivor_local=survivor % per_node,
        survivor_host=hosts[survivor // per_node],
        survivor_code=1, dead=dead, dead_local=dead % per_node, dead_host=hosts[dead // per_node],
        dead_code=-9 if killed else 1,
        dead_traceback=f"Signal 9 (SIGKILL) received by PID {4200 + dead}" if killed else
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        tail=(f"slurmstepd: error: Detected 1 oom_kill event in StepId=4711.0. Some of the step tasks have been "
              f"OOM Killed.\nsrun: error: {hosts[dead // per_node]}: task {dead // per_node}: Out Of Memory\n"
              if killed else
              f"srun: error: {hosts[dead // per_node]}: task {dead // per_node}: Exited with exit code 1\n"))


LOGS = ((3, 2, 4, 2, True), (1, 0, 4, 2, False), (4, 0, 6, 3, True))


def _grade_dead_rank(fn):
    for number_, (dead, survivor, world, per_node, killed) in enumerate(LOGS, start=1):
        returned = call(fn, failed_log(dead, survivor, world, per_node, killed))
        got = as_int(returned)
        if got is None:
            fail("ex.dead_rank.type", log=number_, got=shown(returned))
        if got == dead:
            continue
        if got == survivor or got in range(world):
            fail("ex.dead_rank.survivor", log=number_, got=got, dead=dead)
        fail("ex.dead_rank.wrong", log=number_, got=got, world=world)
    return {}


DEAD_RANK_CODE = '''
def dead_rank(log):
    import re
    # ⟪torchrun'ın özeti ilk hatayı adlandırır‖torchrun's summary names the first failure⟫
    root_cause = log.split("Root Cause (first observed failure):")[1]
    return int(re.search(r"rank\\s*:\\s*(\\d+)", root_cause).group(1))
'''


# ----------------------------------------------------------------------------------------------
# 06 · the learning rate for a bigger global batch: the rules behind --scale-lr (which one wins is measured)

RULES = ("none", "linear", "sqrt")


def _grade_lr(fn):
    for base, base_batch, global_batch in ((0.001, 128, 768), (0.1, 128, 512), (0.002, 64, 64), (0.05, 32, 96)):
        k = global_batch / base_batch
        for rule in RULES:
            want = base * {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule]
            returned = call(fn, base, base_batch, global_batch, rule)
            got = as_number(returned)
            if got is None:
                fail("ex.lr_for.type", got=shown(returned))
            if abs(got - want) <= 1e-9 + 1e-6 * want:
                continue
            fields = dict(rule=rule, base=number(base), base_batch=base_batch, global_batch=global_batch,
                          got=number(got, decimals=6), want=number(want, decimals=6))
            if rule == "sqrt" and abs(got - math.sqrt(base * k)) <= 1e-9 + 1e-6 * math.sqrt(base * k):
                fail("ex.lr_for.sqrt_of_lr", **fields)
            inverted = base / {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[rule]
            if rule != "none" and k != 1 and abs(got - inverted) <= 1e-9 + 1e-6 * inverted:
                fail("ex.lr_for.inverted", k=number(k), **fields)  # base_batch / global_batch: the ratio upside down
            if rule != "none" and k != 1 and abs(got - base * (global_batch if rule == "linear"
                                                            else math.sqrt(global_batch))) <= 1e-9:
                fail("ex.lr_for.batch_not_ratio", **fields)
            fail("ex.lr_for.wrong", **fields)
    return {"none": number(0.001), "linear": number(0.006), "sqrt": number(0.001 * math.sqrt(6), decimals=5)}


LR_CODE = '''
def lr_for(base_lr, base_batch, global_batch, rule):
    import math
    k = global_batch / base_batch  # ⟪küresel parti kaç kat büyüdü‖how many times the global batch grew⟫
    if rule == "linear":
        return base_lr * k  # ⟪doğrusal kural (Goyal ve ark., 2017)‖linear rule (Goyal et al., 2017)⟫
    if rule == "sqrt":
        return base_lr * math.sqrt(k)  # ⟪karekök kuralı (Malladi ve ark., 2022)‖square-root rule (Malladi et al.)⟫
    return base_lr  # ⟪"none": lr olduğu gibi‖"none": the lr as it was⟫
'''


def _sbatch_stub(lang=None):
    """The exercise cell of fixed_sbatch: the seed's script, shown, and left as it is."""
    return ("from ddp_tutorial.exercises import SEED_SBATCH\n\nprint(SEED_SBATCH)\n"
            "fixed_sbatch = SEED_SBATCH  # " + t("ex.fixed_sbatch.your_code", lang=lang))


EXERCISES = (
    Exercise(
        "fixed_sbatch", "05", _grade_sbatch, SBATCH_CODE,
        WrongAnswer("from ddp_tutorial.exercises import SEED_SBATCH\nfixed_sbatch = SEED_SBATCH.replace("
                    "'#SBACTH', '#SBATCH').replace('01_distributed.p\\n', '01_distributed.py\\n')",
                    "ex.fixed_sbatch.port"),
        stub=_sbatch_stub),
    Exercise(
        "who_am_i", "05", _grade_who_am_i, WHO_AM_I_CODE,
        WrongAnswer("def who_am_i(environ):\n    if 'SLURM_PROCID' in environ:\n"
                    "        return int(environ['SLURM_PROCID']), int(environ['SLURM_LOCALID']), "
                    "int(environ['SLURM_NTASKS'])\n    if 'RANK' in environ:\n"
                    "        return int(environ['RANK']), int(environ['LOCAL_RANK']), int(environ['WORLD_SIZE'])\n"
                    "    return 0, 0, 1", "ex.who_am_i.slurm_first")),
    Exercise(
        "master_addr", "05", _grade_master_addr, MASTER_ADDR_CODE,
        WrongAnswer("def master_addr(nodelist):\n    return nodelist.split(',')[0]", "ex.master_addr.wrong")),
    Exercise(
        "dead_rank", "05", _grade_dead_rank, DEAD_RANK_CODE,
        WrongAnswer("def dead_rank(log):\n    import re\n"
                    "    return int(re.search(r'\\brank\\s*:\\s*(\\d+)', log).group(1))", "ex.dead_rank.survivor")),
    Exercise(
        "lr_for", "06", _grade_lr, LR_CODE,
        WrongAnswer("def lr_for(base_lr, base_batch, global_batch, rule):\n    import math\n"
                    "    k = global_batch / base_batch\n"
                    "    return {'none': base_lr, 'linear': base_lr * k, 'sqrt': math.sqrt(base_lr * k)}[rule]",
                    "ex.lr_for.sqrt_of_lr")),
)
