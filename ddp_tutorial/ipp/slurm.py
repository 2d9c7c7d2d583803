"""SLURM engines: the notebook's engines as the tasks of one SLURM job, across nodes.

On a cluster the notebook runs on a login node, which has no GPUs to train on. ipyparallel
can start its engines *through SLURM*: the controller stays next to the notebook, and one
SLURM job runs one engine per GPU (or per CPU process) on the nodes it is given. This module

1. renders the job's script from ``slurm/ipengines.sbatch`` with the same validated
   parameters as the training templates (site profile, nodes, GPUs, cores, time, account,
   module / conda / venv set-up — :func:`ddp_tutorial.slurm.render_engines`) and hands it to
   ipyparallel's ``SlurmEngineSetLauncher``, which submits it with ``sbatch``;
2. makes the controller listen on an address the compute nodes can reach: by default the
   address of this machine on the route to the SLURM controller (``SlurmctldHost``), which is
   the cluster's internal network; ``controller_ip=`` overrides it;
3. watches the job while the engines come up: it prints the job's state (``PENDING (reason:
   Resources)`` → ``RUNNING``), fails clearly if the job ends, stays pending too long, or its
   engines never reach the controller — and cancels the job in each case;
4. asks every engine where it runs (``SLURMD_NODENAME``, ``SLURM_PROCID``, ``SLURM_LOCALID``, and its
   address on the route to the controller) and orders the ranks by ``SLURM_PROCID``: rank 0 is the
   first task on the first node, the address it reports is ``MASTER_ADDR`` (a node name need not
   resolve on the nodes' network), and ``SLURM_LOCALID`` is the local rank (the GPU on that node).
   Each engine sets ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` by the templates' interface rule
   (:func:`ddp_tutorial.ipp.remote.use_interface`). ``python=`` starts the engines through another
   interpreter, e.g. the wrapper that runs the workshop container (:func:`engine_command`).

After :func:`start`, :func:`ddp_tutorial.ipp.train` and :func:`ddp_tutorial.ipp.run` use these
engines (world size = number of engines), and :func:`ddp_tutorial.ipp.stop` ends the job, which
gives the allocation back. If the notebook kernel dies, its watchdog cancels the job.

    from ddp_tutorial import ipp
    ipp.start_slurm(nodes=2, profile="gpu-a", account="myaccount", reservation="ddp", time_limit="01:00:00")
    results = ipp.train(TrainConfig(epochs=1), keep=True)   # world size: the engines of both nodes
    ipp.stop()                                              # scancel: the nodes are free again
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import List, Optional, Tuple

from .. import slurm as batch
from ..config import JOB_OPTIONS
from ..i18n import TutorialError, t
from ..slurm import class_shape
from ..slurm.jobs import reservation_note, without_session
from . import engines as es
from . import held_port, remote
from .watchdog import Guard


QUEUE_TIMEOUT = 900.0     # seconds a job may stay PENDING before start() gives up and cancels it
REGISTER_TIMEOUT = 180.0  # seconds from RUNNING until every engine has reached the controller
POLL_SECONDS = 1.0        # how often start() looks at the job and the engines
JOB_CHECK_SECONDS = 5.0   # while running: how often to ask SLURM whether the job still runs
SLURMCTLD_PORT = 6817     # only used to ask the kernel which interface routes to the controller
LOG_TAIL = 15             # log lines shown when the job fails


# --------------------------------------------------------------------------------------
# Where the controller listens


def slurmctld_host(config_text: str) -> Optional[str]:
    """The SLURM controller's address (or name) from ``scontrol show config``:
    ``SlurmctldHost[0] = name(10.0.0.1)`` → ``10.0.0.1``; ``= name`` → ``name``."""
    m = re.search(r"^SlurmctldHost\[0\]\s*=\s*([^\s(]+)(?:\(([^)\s]+)\))?", config_text, re.M)
    if not m:
        m = re.search(r"^ControlAddr\s*=\s*(\S+)()", config_text, re.M)  # older SLURM
    if not m:
        return None
    return m.group(2) or m.group(1)


def controller_address() -> Optional[str]:
    """An address of this machine that the compute nodes can reach: the one on the route to
    the SLURM controller (the cluster's internal network). ``None`` when it cannot be told."""
    try:
        proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    host = slurmctld_host(proc.stdout) if proc.returncode == 0 else None
    return remote.address_towards(host, SLURMCTLD_PORT) if host else None


def check_address(value: str) -> str:
    """``controller_ip`` given by the user: an IPv4 address this machine can listen on."""
    try:
        socket.inet_aton(value)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((value, 0))
    except (OSError, TypeError) as error:
        raise TutorialError("ipp.slurm_bad_address", value=value, detail=str(error)) from None
    return value


# --------------------------------------------------------------------------------------
# The job


def log_tail(job_id: str) -> Tuple[str, str]:
    """(where the job's log is, its last lines)."""
    try:
        path = batch.log_path(job_id)
        return str(path), batch.read_log(job_id, tail=LOG_TAIL).rstrip() if path.is_file() else "-"
    except TutorialError:
        return "-", "-"


def cancel(job_id: str) -> None:
    try:
        batch.cancel(job_id)
    except TutorialError:
        pass  # already gone


def wait_for_job_end(job_id: str, timeout: float = 60.0) -> None:
    """After ``scancel``: wait until SLURM reports the job finished (its tasks are gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = batch.job_info(job_id)
        except TutorialError:
            return
        if info.finished or info.state == "UNKNOWN":
            return
        time.sleep(0.5)


@dataclass
class SlurmEngines(es.EngineSet):
    """Engines that are the tasks of one SLURM job: alive while the controller lists them (a
    nanny reports its engine's death at once; a lost node is noticed by the heartbeat)."""

    job_id: str = ""                                       # the job whose tasks they are
    hosts: List[str] = field(default_factory=list)         # each rank's node
    local_ranks: List[int] = field(default_factory=list)   # each rank's place on its node
    checked_at: float = 0.0

    def local_rank(self, rank: int) -> int:
        return self.local_ranks[rank]

    def per_node(self, rank: int, n: int) -> int:
        return sum(1 for host in self.hosts[:n] if host == self.hosts[rank])

    def alive(self, rank: int) -> bool:
        try:
            return self.ids[rank] in self.client.ids
        except Exception:  # noqa: BLE001 - the client lost the controller
            return False

    def is_stopped(self, rank: int) -> bool:
        return False  # its pid is on another node: no status seen from here

    def describe_loss(self, rank: int) -> str:
        try:
            state = batch.job_info(self.job_id).state
        except TutorialError:
            state = "?"
        return t("ipp.slurm_lost", job_id=self.job_id, state=state)

    def ended(self) -> Optional[str]:
        now = time.monotonic()
        if now - self.checked_at < JOB_CHECK_SECONDS:
            return None
        self.checked_at = now
        return self.job_ended()

    def job_ended(self) -> Optional[str]:
        """A failure text when the engines' job is no longer running, else ``None``."""
        try:
            info = batch.job_info(self.job_id)
        except TutorialError:
            return None  # SLURM did not answer this time: the engines themselves are watched too
        if info.state in ("RUNNING", "UNKNOWN"):
            return None
        log, tail = log_tail(self.job_id)
        return t("ipp.slurm_job_ended", job_id=self.job_id, state=info.state, log=log, tail=tail)

    def master_port(self) -> int:
        """A free port on rank 0's node, chosen there (not yet held open as local engines do: on the SLURM lab
        a store server made on the engine did not answer within 30 s; see the CHANGELOG)."""
        return self.client[self.ids[0]].apply_sync(held_port.free_port)

    def stop(self, force: bool = False) -> List[int]:
        leftover = super().stop(force=force)
        wait_for_job_end(self.job_id)
        return leftover

    def stopped_text(self) -> str:
        return t("ipp.stopped_slurm", job_id=self.job_id)

    def check_usable(self, n: Optional[int], device: str) -> "SlurmEngines":
        """These engines, if they can run ``n`` ranks on ``device``; else a clear error."""
        if not self.controller_alive():
            why = t("ipp.cause_controller", pid=self.cluster.controller.pid)
        elif not all(self.alive(rank) for rank in range(self.size)):
            why = self.describe_loss(0)
        else:
            why = self.job_ended()
        if why:
            es.stop(force=True)
            raise TutorialError("ipp.slurm_gone", why=why)
        n = self.size if n is None else n
        es.check_count(n)
        if n > self.size:
            raise TutorialError("ipp.slurm_too_few", n=n, size=self.size)
        if device == "cuda" and self.device != "cuda":
            raise TutorialError("ipp.slurm_not_cuda")
        return self


# --------------------------------------------------------------------------------------
# Starting


# start()'s words for JobSpec fields whose name says something else for engines (submitit's
# _equivalence_dict); every other JobSpec field that shapes the allocation is taken by its own name.
RENAMED = {"engines_per_node": "nproc_per_node", "cpus_per_engine": "cpus_per_process", "time_limit": "time"}
# Where an engine job differs from JobSpec's defaults.
ENGINE_JOB = dict(time="01:00:00", job_name="ddp-tutorial-engines")
# JobSpec fields an engine job does not use: the template, what the processes run and where, preemption.
NOT_FOR_ENGINES = {"template", "workdir", "train_args", "script", "script_args", "signal_seconds",
                   "requeue", *JOB_OPTIONS}


def start(nodes: int = 1, engines_per_node: Optional[int] = None, gpus_per_node: Optional[int] = None,
          profile: Optional[str] = None, *, controller_ip: Optional[str] = None, queue_timeout: float = QUEUE_TIMEOUT,
          register_timeout: float = REGISTER_TIMEOUT, **job) -> SlurmEngines:
    """Start one engine per GPU (``gpus_per_node``; default: the class's shape, ``$DDP_TUTORIAL_SLURM_GPUS``,
    :func:`ddp_tutorial.slurm.class_job`) or ``engines_per_node`` CPU engines on each of ``nodes`` nodes,
    through one SLURM job; keep them for
    :func:`ddp_tutorial.ipp.train` / :func:`~ddp_tutorial.ipp.run` (see the module docstring).

    ``profile``: a site profile of :data:`ddp_tutorial.slurm.PROFILES` (a GPU partition of the session's site
    table: partition, GPUs and cores per node; default: the workshop's,
    :func:`ddp_tutorial.slurm.workshop_profile`). ``job``: the fields of
    :class:`ddp_tutorial.slurm.JobSpec` for the allocation and the set-up (partition, account, reservation, qos,
    run_dir, modules, conda, conda_env, venv, env, job_name …), with
    three names of their own here: ``cpus_per_engine`` (JobSpec's ``cpus_per_process``),
    ``time_limit`` (``time``, default 01:00:00), ``engines_per_node`` (``nproc_per_node``). Account,
    reservation and ``run_dir`` default to the class's (``$DDP_TUTORIAL_SLURM_ACCOUNT``,
    ``$DDP_TUTORIAL_SLURM_RESERVATION``, the site's scratch folder or ``runs``). The job's script and log go
    to ``run_dir``; the job is never requeued (``#SBATCH --no-requeue``), and its ``sbatch`` runs without the
    session job's own ``SLURM_*`` variables (:func:`submit_command`).
    """
    es.check_kernel_has_no_cuda()
    profile = profile or batch.workshop_profile()
    spec = _engine_spec(profile, dict(nodes=nodes, gpus_per_node=gpus_per_node, nproc_per_node=engines_per_node),
                        job)
    template = batch.render_engines(spec)  # every value checked before anything is submitted
    # partition, account, reservation, nodes, GPUs, cores; where the log goes
    print(class_shape.class_preview(spec, profile=profile), flush=True)
    if shutil.which("sbatch") is None:
        raise TutorialError("slurm.missing", command="sbatch")
    address = check_address(controller_ip) if controller_ip else controller_address()
    n, device = spec.world_size, ("cuda" if spec.gpus_per_node else "cpu")
    es.stop()  # one kept engine set at a time

    import ipyparallel

    began = time.perf_counter()
    run_path = Path(spec.run_dir)
    run_path.mkdir(parents=True, exist_ok=True)
    cluster = ipyparallel.Cluster(
        n=n, engine_launcher_class="slurm", log_level=logging.ERROR,
        # Listen where the nodes can reach us; "*" (every interface) when no address could be told.
        controller_ip=address or "*", controller_location=address or "")
    client, job_id, guard = None, None, None
    try:
        cluster.start_controller_sync()
        script = run_path / f"ipengines-{cluster.cluster_id}.sbatch"
        try:
            set_id = cluster.start_engines_sync(n, batch_template=template, batch_file_name=str(script),
                                                submit_command=submit_command(), engine_args=list(es.ENGINE_ARGS),
                                                **engine_command(job.get("python")))
        except subprocess.CalledProcessError:
            batch.check_accepted(script, spec)  # sbatch refused the script: ask it why; say what to change
            raise
        job_id = batch.job_id_of(cluster.engines[set_id].job_id)
        guard = Guard([p.pid for p in es.with_helpers([cluster.controller.pid])], job_id=job_id,
                      files=[cluster.cluster_file])
        print(t("ipp.slurm_submitted", job_id=job_id, n=n, nodes=spec.nodes, address=address or "*",
                script=script), flush=True)
        client = cluster.connect_client_sync()
        _wait_for_engines(client, n, job_id, address or "*", queue_timeout, register_timeout)
        where = {eid: client[eid].apply_sync(remote.where, os.getcwd(), list(sys.path), address)
                 for eid in client.ids}
    except BaseException:
        es.shutdown(cluster, client, es.with_helpers([cluster.controller.pid]) if cluster.controller else [],
                    force=True)
        if job_id is not None:
            wait_for_job_end(job_id)
        if guard is not None:
            guard.release()
        raise
    # Rank order = SLURM's task order: block distribution puts consecutive tasks on one node,
    # so rank 0 is the first task of the first node and local ranks count up on each node.
    ordered = sorted((info["procid"], eid) for eid, info in where.items() if info["job_id"] == job_id)
    ids = [eid for _, eid in ordered][:n]
    engines = SlurmEngines(
        cluster=cluster, client=client, ids=ids, pids=[where[e]["pid"] for e in ids], device=device,
        processes=es.with_helpers([cluster.controller.pid]), job_id=job_id,
        hosts=[where[e]["host"] for e in ids], local_ranks=[where[e]["localid"] for e in ids],
        # rank 0's own address on the network it reached the controller on (not SLURMD_NODENAME,
        # which need not resolve on the nodes' network)
        master_addr=where[ids[0]]["address"], guard=guard)
    client[ids].apply_async(remote.warm_up)  # imports, while the notebook goes on
    es.keep(engines)
    hosts = ", ".join(f"{h} ×{engines.hosts.count(h)}" for h in dict.fromkeys(engines.hosts))
    print(t("ipp.slurm_started", n=n, seconds=time.perf_counter() - began, hosts=hosts, job_id=job_id,
            device=device, master=engines.master_addr), flush=True)
    return engines


def submit_command() -> List[str]:
    """ipyparallel's sbatch call, without the variables of the job this kernel runs in (T5-15): ipyparallel
    submits with this process's whole environment, and the engines' job would read the session's
    ``SRUN_CPUS_PER_TASK``, ``SLURM_CPU_BIND`` … as its own (:func:`ddp_tutorial.slurm.jobs.without_session`)."""
    dropped = sorted(set(os.environ) - set(without_session(os.environ)))
    return ["env", *[word for name in dropped for word in ("-u", name)], "sbatch"] if dropped else ["sbatch"]


def engine_command(python: Optional[str]) -> dict:
    """``python=``: the engines' interpreter instead of this kernel's, e.g. the two-line wrapper that
    runs the workshop container (``exec apptainer exec --nv …/ddp-env.sif python "$@"``, docs/truba.md).
    It must be an executable file here, on the shared file system the nodes see too."""
    if python is None:
        return {}
    path = Path(python).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise TutorialError("ipp.slurm_bad_python", path=str(path))
    return {"engine_cmd": [str(path.resolve()), "-m", "ipyparallel.engine"]}


def _engine_spec(profile: Optional[str], values: dict, job: dict) -> "batch.JobSpec":
    """The JobSpec of an engine job: ``values`` (JobSpec's names) with ``job`` (start()'s names) over
    :data:`ENGINE_JOB` and the class's shape (:func:`ddp_tutorial.slurm.class_shape.engine_defaults`: the
    GPUs per node of ``DDP_TUTORIAL_SLURM_GPUS`` unless GPUs or engines per node are given, the class's
    account, reservation and run folder unless given); a name the engines do not take is a clear error,
    not a silent no-op."""
    takes = ({f.name for f in dataclass_fields(batch.JobSpec)} - NOT_FOR_ENGINES - set(RENAMED.values())) | set(RENAMED)
    for name in job:
        if name not in takes:
            choices = sorted(takes | set(inspect.signature(start).parameters) - {"job"})
            raise TutorialError("config.unknown_option", function="ipp.start_slurm", name=name,
                                choices=", ".join(choices))
    profile = profile or batch.workshop_profile()
    shape = class_shape.engine_defaults(profile)
    if values.get("gpus_per_node") is None and values.get("nproc_per_node") is None:
        values = dict(values, gpus_per_node=shape.pop("gpus_per_node"), nproc_per_node=shape.pop("engines_per_node"))
    else:  # the caller's GPUs or engines per node: the profile's cores per GPU, as before
        shape = {k: v for k, v in shape.items() if k in ("account", "reservation", "run_dir")}
    job = {**{k: v for k, v in shape.items() if k in takes}, **job}
    values = dict(ENGINE_JOB, **values)
    for name, value in job.items():
        values[RENAMED.get(name, name)] = value
    values["modules"], values["env"] = tuple(values.get("modules", ())), tuple(values.get("env", ()))
    run_dir = values.get("run_dir", "runs")
    values["run_dir"] = str(Path(run_dir).expanduser().resolve()) if isinstance(run_dir, str) else run_dir
    return batch.JobSpec.from_profile(profile, **values)


def _wait_for_engines(client, n: int, job_id: str, address: str, queue_timeout: float,
                      register_timeout: float) -> None:
    """Wait until ``n`` engines have registered, printing the job's state changes and the count;
    raise (after cancelling the job) when the job ends, stays pending too long, or its engines
    never arrive."""
    began = time.monotonic()
    running_since = None
    last = None
    while True:
        got = len(client.ids)
        if got >= n:
            return
        info = batch.job_info(job_id)
        if (info.state, info.reason, got) != last:
            last = (info.state, info.reason, got)
            print(info.describe() + reservation_note(info) + " · "
                  + t("ipp.registering", got=got, n=n, seconds=time.monotonic() - began), flush=True)
        now = time.monotonic()
        if info.finished:
            log, tail = log_tail(job_id)
            raise TutorialError("ipp.slurm_start_ended", job_id=job_id, state=info.state, got=got, n=n,
                                address=address, log=log, tail=tail)
        if info.state == "RUNNING":
            running_since = running_since or now
            if now - running_since > register_timeout:
                cancel(job_id)
                log, tail = log_tail(job_id)
                raise TutorialError("ipp.slurm_no_register", job_id=job_id, got=got, n=n, address=address,
                                    seconds=register_timeout, log=log, tail=tail)
        elif now - began > queue_timeout:
            cancel(job_id)
            reason = t("slurm.state.reason", reason=info.reason) if info.reason and info.reason != "None" else ""
            raise TutorialError("ipp.slurm_pending_timeout", job_id=job_id, state=info.state, reason=reason,
                                seconds=now - began)
        time.sleep(POLL_SECONDS)
