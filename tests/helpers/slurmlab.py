"""A real two-node SLURM cluster on one machine, for the test suite.

``SlurmLab`` starts, in a fresh temporary directory:

* ``munged`` with its own key and socket (authentication between the daemons);
* three network namespaces: a *hub* holding a bridge at 10.233.0.254 where
  ``slurmctld`` runs, and one namespace per node (``n1`` = 10.233.0.1,
  ``n2`` = 10.233.0.2) joined to the bridge by a veth pair;
* one ``slurmd`` per node inside its namespace, under ``unshare --uts --mount``
  so it has its own host name (``n1``/``n2``) and sees a bind-mounted
  ``/etc/hosts`` naming every node (so ``MASTER_ADDR=n1`` resolves in a job);
* a *login node*: the hub namespace doubles as one (:meth:`SlurmLab.login_command`), so a
  process started there — a notebook's ipyparallel controller — listens on an address the
  nodes can reach (10.233.0.254);
* fake GPUs: character devices made with ``mknod`` (copies of /dev/null) listed
  in ``gres.conf``, so ``--gres=gpu:N`` is accepted and jobs get
  ``CUDA_VISIBLE_DEVICES`` as on real hardware.
* two partitions over both nodes: ``debug`` (the default) and ``workshop`` (a site's named
  partition, for jobs that name theirs). No slurmdbd (``AccountingStorageType=accounting_storage/none``):
  ``--account`` is accepted unchecked, and reservations (``scontrol create reservation``) work.

``SlurmLab(site="truba")`` builds instead a lab in that site's shape, from its table
(``ddp_tutorial/sites/truba.toml``): nodes named and sized as the table's partitions (``shape``; default
four ``akya-cuda`` nodes ``akya1``–``akya4`` with 40 cores and 4 GPUs each, one ``barbun`` node ``barbun1``
with 40 cores; the table's memory as RealMemory; its partition's name as a node feature, for
``-p debug -C akya-cuda``, plus the partition's own ``-C`` types in turn; the table's GPU model as the GRES type,
``Gres=gpu:v100:4``, which untyped ``--gres=gpu:1`` still fits), one partition per shape entry plus ``debug`` over
every node, each with the table's ``MaxTime`` and ``DefMemPerCPU`` (mem_per_core_mb); ``Default=YES`` on the
table's ``default = true`` partition, else ``debug``, else the first; a ``job_submit.lua``
(``tests/helpers/job_submit.py``) that refuses, in the guide's
words, what the table forbids; and a login node named as the site's (``arf-ui1``) for
:meth:`SlurmLab.login_command`. Each lab has its own namespaces, munge socket and directory, so a site lab
and the default lab run side by side. A ``job_submit.lua`` that slurmctld cannot load ends the start with a
:class:`LabError` (slurmctld exits): a site lab never runs without its rules. ``python
tests/helpers/slurmlab.py truba`` starts one, shows it and stops it.

Client commands (``sbatch``, ``squeue`` …) run from the root namespace through
small wrapper scripts in ``<lab>/bin`` that enter the hub's network namespace;
inside a job (already in a node namespace) the same wrappers call the real
command.  ``lab.env`` is an environment (``PATH`` with the wrappers first,
``SLURM_CONF``) to hand to subprocesses and to ``ddp_tutorial.slurm``.

Everything is recorded by PID and name and removed by ``stop()``; leftovers of
a crashed earlier run (whose owning process is gone) are removed by the next
``start()``.  Needs root, Debian's ``slurm-wlm``/``slurmctld``/``slurmd``/
``slurm-client``/``munge`` packages and ``iproute2``.  See
``SlurmLab.missing()`` for the check the fixtures use to skip.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

#: Binaries the lab needs (daemons, clients, namespace tools).
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "salloc")
TOOLS = ("ip", "nsenter", "unshare", "mount", "mknod")

PREFIX = "slab"  # namespace names: slab<ownerpid>x<token>-hub / -n1 / -n2
TMP_PREFIX = "slurmlab-"  # lab directories: $TMPDIR/slurmlab-<ownerpid>-<token>
SUBNET = "10.233.0"
HUB_ADDR = f"{SUBNET}.254"
KILL_GRACE_S = 10.0
#: A site lab's nodes by default: partition → how many nodes (at most 9 in all).
SITE_SHAPE = {"akya-cuda": 4, "barbun": 1}

Command = Union[str, Sequence[str]]


class LabError(RuntimeError):
    """The lab could not be started; the text says which step failed."""


def _stat(pid: int) -> Optional[List[str]]:
    """Fields of /proc/PID/stat after the command name (state is [0], start time is [19])."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _alive(pid: int, start_time: Optional[str] = None) -> bool:
    """Is ``pid`` a living process (not a zombie), and the same one that started at ``start_time``?"""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_time is None or fields[19] == start_time


def _sh(args: Sequence[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


class SlurmLab:
    """A two-node SLURM cluster in network namespaces (see the module docstring)."""

    def __init__(
        self,
        nodes: int = 2,
        cpus_per_node: int = 8,
        gpus_per_node: int = 4,
        base_dir: Optional[str] = None,
        keep: Optional[bool] = None,
        site: Optional[str] = None,
        shape: Optional[Dict[str, int]] = None,
    ):
        # CPUs may exceed the real cores: slurmd runs with config_overrides and
        # the tests want several small jobs on one node at once.
        self.cpus_per_node = cpus_per_node
        self.gpus_per_node = gpus_per_node
        #: the site's table (``ddp_tutorial.sites.Site``) for a lab in a site's shape, else None
        self.site = None
        #: the login node's host name in :meth:`login_command` (None: the host's own)
        self.login_host: Optional[str] = None
        #: per node, slurm.conf's extra words (a site lab: RealMemory from the table, Features=<its partition>)
        self.node_extra: Dict[str, str] = {}
        #: per node, its GPUs' GRES type (a site lab: the table's GPU model, ``v100``); absent: untyped
        self.gres_type: Dict[str, str] = {}
        #: per partition, slurm.conf's extra words (a site lab: DefMemPerCPU from the table)
        self.partition_extra: Dict[str, str] = {}
        #: the default partition (``Default=YES``); None: the first
        self.default_partition: Optional[str] = None
        if site is None:
            if not 1 <= nodes <= 9:
                raise ValueError("nodes must be 1..9")
            self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
            self.node_cpus = {name: cpus_per_node for name in self.node_names}
            self.node_gpus = {name: gpus_per_node for name in self.node_names}
            #: partition → its nodes; the first is the default partition
            self.partitions = {"debug": list(self.node_names), "workshop": list(self.node_names)}
            self.max_time = {"debug": "INFINITE", "workshop": "INFINITE"}
        else:
            self._site_shape(site, dict(shape or SITE_SHAPE))
        self.base_dir = base_dir or tempfile.gettempdir()
        self.keep = keep if keep is not None else os.environ.get("SLURMLAB_KEEP") == "1"
        token = secrets.token_hex(3)
        self.tag = f"{PREFIX}{os.getpid()}x{token}"
        self.dir = Path(self.base_dir) / f"{TMP_PREFIX}{os.getpid()}-{token}"
        self.hub_ns = f"{self.tag}-hub"
        self.node_ns = {name: f"{self.tag}-{name}" for name in self.node_names}
        self.ctl_host = "slabctl"
        self.procs: Dict[str, subprocess.Popen] = {}
        self._env: Dict[str, str] = {}
        self._netns_made: List[str] = []
        self._started = False

    def _site_shape(self, site: str, shape: Dict[str, int]) -> None:
        """Nodes, partitions and login host from the site's table: ``shape`` is partition → node count."""
        from ddp_tutorial import sites

        table = sites.load(site)
        unknown = [name for name in shape if name not in table.partitions]
        if unknown:
            raise ValueError(f"{site} has no partition {', '.join(unknown)} (it has {', '.join(table.partitions)})")
        if not 1 <= sum(shape.values()) <= 16:
            raise ValueError("a site lab has 1..16 nodes")
        self.site = table
        self.node_names, self.node_cpus, self.node_gpus, self.partitions, self.max_time = [], {}, {}, {}, {}
        if "debug" in table.partitions:  # the site's short-job partition spans every node, as on TRUBA
            self.partitions["debug"] = []
            self.max_time["debug"] = table.partitions["debug"].max_time or "INFINITE"
        prefixes = set()
        for name, count in shape.items():
            part = table.partitions[name]
            prefix = name.split("-")[0]  # akya-cuda → akya1, akya2 …
            if prefix in prefixes:
                prefix = re.sub(r"[^a-z0-9]", "", name)
            prefixes.add(prefix)
            nodes = [f"{prefix}{i}" for i in range(1, count + 1)]
            # the node types -C picks within the partition (kolyoz-cuda's H100 / H200), and the GPU models its
            # table names ("H100 80 GB / H200 141 GB, sm_90" → h100, h200): node i gets the i-th, in turn
            kinds = [c for c in part.constraints if c not in table.partitions]
            model_words = (part.gpu or "").split(",")[0]
            models = [m.lower() for m in re.findall(r"\b([A-Za-z]{1,2}\d{2,4}[A-Za-z]?)\b", model_words)]
            for i, node in enumerate(nodes):
                self.node_names.append(node)
                self.node_cpus[node] = part.cores_per_node or self.cpus_per_node
                self.node_gpus[node] = part.gpus_per_node or 0
                memory = f" RealMemory={part.memory_gb * 1024}" if part.memory_gb else ""
                features = ",".join([name] + ([kinds[i % len(kinds)]] if kinds else []))
                self.node_extra[node] = f"{memory} Features={features}"  # debug's -C akya-cuda / -C barbun
                if models and self.node_gpus[node]:
                    self.gres_type[node] = models[i % len(models)]  # Gres=gpu:v100:4; --gres=gpu:1 still fits
            self.partitions[name] = nodes
            self.max_time[name] = part.max_time or "INFINITE"
        for name in self.partitions:  # what a job without --mem gets per core, as the site's SLURM says
            mem = table.partitions[name].mem_per_core_mb
            self.partition_extra[name] = f" DefMemPerCPU={mem}" if mem else ""
        self.default_partition = table.default_partition or ("debug" if "debug" in self.partitions else None)
        if "debug" in self.partitions:
            self.partitions["debug"] = list(self.node_names)
        hosts = table.raw.get("login", {}).get("hosts", [])
        self.login_host = hosts[0] if hosts else None

    # ------------------------------------------------------------------ checks
    @staticmethod
    def missing() -> List[str]:
        """What this machine lacks to run the lab (empty when it can run)."""
        reasons = []
        if os.name != "posix" or not hasattr(os, "geteuid"):
            return ["a Linux machine"]
        if os.geteuid() != 0:
            reasons.append("root (network namespaces, nsenter, mount --bind, mknod)")
        absent = [b for b in DAEMONS + CLIENTS + TOOLS if shutil.which(b) is None and not _in_sbin(b)]
        if absent:
            reasons.append(
                "programs " + ", ".join(absent)
                + " (apt-get install --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge iproute2)"
            )
        if not Path("/proc/self/ns/net").exists():
            reasons.append("network namespaces (/proc/self/ns/net)")
        return reasons

    # ------------------------------------------------------------------ start
    def start(self, timeout: float = 60) -> "SlurmLab":
        cleanup_stale(self.base_dir)
        t0 = time.monotonic()
        try:
            self._write_files()
            self._make_network()
            self._start_munge()
            self._start_slurmctld()
            self._start_slurmd()
            self._wait_idle(timeout - (time.monotonic() - t0))
        except BaseException:
            logs = self.log_tail()
            self.stop()
            if logs:
                print(logs)
            raise
        self._started = True
        self.start_seconds = time.monotonic() - t0
        return self

    def __enter__(self) -> "SlurmLab":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)

    def _write_files(self) -> None:
        for sub in ("etc", "munge", "state", "run", "log", "bin", "fakegpu", "jobs"):
            self.path(sub).mkdir(parents=True, exist_ok=True)
        for node in self.node_names:
            self.path("spool", node).mkdir(parents=True, exist_ok=True)
        # A record of who made this directory, for cleanup after a crash.
        self.path("owner").write_text(f"{os.getpid()} {_stat(os.getpid())[19]}\n{self.tag}\n")
        os.chmod(self.path("munge"), 0o755)  # munged refuses a group/world-writable socket dir

        key = self.path("munge", "munge.key")
        _sh([_which("mungekey"), "-c", "-k", str(key)])
        os.chmod(key, 0o600)

        # Fake GPUs: gres.conf wants character devices; copies of /dev/null (1,3) do.
        for i in range(max(self.node_gpus.values())):
            dev = self.path("fakegpu", f"nvidia{i}")
            if not dev.exists():
                _sh(["mknod", str(dev), "c", "1", "3"])

        n = len(self.node_names)
        lab = str(self.dir)
        conf = f"""\
# Written by tests/helpers/slurmlab.py: a {n}-node cluster inside network namespaces.
ClusterName=lab
SlurmctldHost={self.ctl_host}({HUB_ADDR})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={lab}/munge/socket,cred_expire=5
MailProg=/bin/true
StateSaveLocation={lab}/state
SlurmdSpoolDir={lab}/spool/%n
SlurmctldPidFile={lab}/run/slurmctld.pid
SlurmdPidFile={lab}/run/slurmd-%n.pid
SlurmctldLogFile={lab}/log/slurmctld.log
SlurmdLogFile={lab}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
SchedulerParameters=sched_interval=1,bf_interval=1
MessageTimeout=20
GresTypes=gpu
"""
        gres = ["AutoDetect=off"]
        for i, node in enumerate(self.node_names, start=1):
            gpus = self.node_gpus[node]
            conf += f"NodeName={node} NodeAddr={SUBNET}.{i} CPUs={self.node_cpus[node]}"
            conf += self.node_extra.get(node, "")
            kind = self.gres_type.get(node)
            conf += f" Gres=gpu:{kind + ':' if kind else ''}{gpus}\n" if gpus else "\n"
            if gpus:
                files = f"{lab}/fakegpu/nvidia[0-{gpus - 1}]" if gpus > 1 else f"{lab}/fakegpu/nvidia0"
                gres.append(f"NodeName={node} Name=gpu{' Type=' + kind if kind else ''} File={files}")
        default = self.default_partition or next(iter(self.partitions))
        for part, nodes in self.partitions.items():
            members = "ALL" if nodes == self.node_names else ",".join(nodes)
            conf += (f"PartitionName={part} Nodes={members} Default={'YES' if part == default else 'NO'}"
                     f" MaxTime={self.max_time[part]}{self.partition_extra.get(part, '')} State=UP\n")
        if self.site is not None:
            # the site's rules at submit: job_submit.lua beside slurm.conf (tests/helpers/job_submit.py)
            import job_submit

            conf += "JobSubmitPlugins=lua\n"
            self.path("etc", "job_submit.lua").write_text(
                job_submit.lua(self.site, list(self.partitions), default=default))
        self.path("etc", "slurm.conf").write_text(conf)
        self.path("etc", "gres.conf").write_text("\n".join(gres) + "\n")
        login = f" {self.login_host}" if self.login_host else ""
        hosts = ["127.0.0.1 localhost", f"{HUB_ADDR} {self.ctl_host}{login}"]
        hosts += [f"{SUBNET}.{i} {name}" for i, name in enumerate(self.node_names, start=1)]
        self.path("etc", "hosts").write_text("\n".join(hosts) + "\n")
        # Names resolve from that file only: no DNS query ever leaves a namespace.
        nsswitch = Path("/etc/nsswitch.conf").read_text() if Path("/etc/nsswitch.conf").is_file() else ""
        nsswitch = re.sub(r"(?m)^hosts:.*$", "hosts: files", nsswitch)
        if "hosts:" not in nsswitch:
            nsswitch += "hosts: files\n"
        self.path("etc", "nsswitch.conf").write_text(nsswitch)
        self.path("etc", "resolv.conf").write_text("# tests/helpers/slurmlab.py: no DNS inside the lab\n")

        # Client wrappers: from the root namespace enter the hub's network
        # namespace (the only one with a route to the daemons); inside a job,
        # already in a node namespace, run the real program.
        root_ns = os.readlink("/proc/self/ns/net")
        for name in CLIENTS:
            real = _which(name)
            wrapper = self.path("bin", name)
            wrapper.write_text(
                "#!/bin/sh\n"
                f"# tests/helpers/slurmlab.py: run {name} in the lab's hub network namespace\n"
                f'if [ "$(readlink /proc/self/ns/net)" = "{root_ns}" ]; then\n'
                f"  exec nsenter --net=/run/netns/{self.hub_ns} {real} \"$@\"\n"
                "fi\n"
                f'exec {real} "$@"\n'
            )
            wrapper.chmod(0o755)

        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        env["PATH"] = f"{self.path('bin')}:{env.get('PATH', '/usr/bin:/bin')}"
        env["SLURM_CONF"] = str(self.path("etc", "slurm.conf"))
        self._env = env

    @property
    def env(self) -> Dict[str, str]:
        """The lab's environment for a command (a new dict each time), with the test running now: pytest's
        PYTEST_CURRENT_TEST, which the lab's jobs inherit through sbatch (benchmarks/suite_cpu.py counts a job's
        CPU for the test that submitted it, not for the one that started the lab)."""
        env = {k: v for k, v in self._env.items() if k != "PYTEST_CURRENT_TEST"}
        if self._env and os.environ.get("PYTEST_CURRENT_TEST"):
            env["PYTEST_CURRENT_TEST"] = os.environ["PYTEST_CURRENT_TEST"]
        return env

    def _make_network(self) -> None:
        hub = self.hub_ns
        self._netns_add(hub)
        _sh(["ip", "-n", hub, "link", "set", "lo", "up"])
        _sh(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
        _sh(["ip", "-n", hub, "addr", "add", f"{HUB_ADDR}/24", "dev", "br0"])
        _sh(["ip", "-n", hub, "link", "set", "br0", "up"])
        for i, name in enumerate(self.node_names, start=1):
            ns = self.node_ns[name]
            self._netns_add(ns)
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            # Both ends are created inside namespaces we own: no interface ever
            # appears in the root namespace.
            _sh(["ip", "-n", hub, "link", "add", f"v{name}", "type", "veth", "peer", "name", "eth0", "netns", ns])
            _sh(["ip", "-n", hub, "link", "set", f"v{name}", "master", "br0"])
            _sh(["ip", "-n", hub, "link", "set", f"v{name}", "up"])
            _sh(["ip", "-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", "eth0"])
            _sh(["ip", "-n", ns, "link", "set", "eth0", "up"])

    def _netns_add(self, name: str) -> None:
        _sh(["ip", "netns", "add", name])
        self._netns_made.append(name)

    def _popen(self, key: str, args: List[str]) -> subprocess.Popen:
        log = open(self.path("log", f"{key}.stdout"), "wb")
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
            start_new_session=True,
        )
        log.close()
        self.procs[key] = proc
        with open(self.path("pids"), "a") as f:
            f.write(f"{key} {proc.pid}\n")
        return proc

    def _start_munge(self) -> None:
        m = self.path("munge")
        self._popen(
            "munged",
            [
                _which("munged"), "-F", "--force",
                f"--key-file={m / 'munge.key'}",
                f"--socket={m / 'socket'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        self._wait_for(lambda: self.path("munge", "socket").exists(), 15, "munged socket", "munged")

    def _isolated(self, ns: str, hostname: str, program: List[str]) -> List[str]:
        """Run ``program`` in network namespace ``ns`` with its own host name and /etc/hosts."""
        binds = " && ".join(
            f"mount --bind {self.path('etc', name)} /etc/{name}"
            for name in ("hosts", "nsswitch.conf", "resolv.conf")
            if Path("/etc", name).exists() or name == "hosts"
        )
        inner = f"{binds} && hostname {hostname} && exec " + " ".join(program)
        # nsenter --net, not `ip netns exec` (that remounts /sys and slurmd's
        # cgroup plugin then fails).
        return [
            "nsenter", f"--net=/run/netns/{ns}",
            "unshare", "--uts", "--mount", "--propagation", "private",
            "sh", "-c", inner,
        ]

    def _start_slurmctld(self) -> None:
        self._popen("slurmctld", self._isolated(self.hub_ns, self.ctl_host, [_which("slurmctld"), "-D", "-i"]))

    def _start_slurmd(self) -> None:
        for name in self.node_names:
            self._popen(
                f"slurmd-{name}",
                self._isolated(self.node_ns[name], name, [_which("slurmd"), "-D", "-N", name]),
            )

    def _wait_for(self, ok, timeout: float, what: str, *watch: str) -> None:
        deadline = time.monotonic() + max(timeout, 1)
        while time.monotonic() < deadline:
            # a daemon that died (slurmctld on a job_submit.lua it cannot load) ends the wait with its log
            for key in watch:
                code = self.procs[key].poll()
                if code is not None:
                    raise LabError(f"{key} exited with {code} while waiting for {what}:\n{self.log_tail()}")
            try:
                if ok():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.2)
        raise LabError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.log_tail()}")

    def _wait_idle(self, timeout: float) -> None:
        def idle() -> bool:
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=2)  # retried
            if proc.returncode != 0:
                return False
            states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
            return all(states.get(n, "").rstrip("*") == "idle" for n in self.node_names)

        self._wait_for(idle, timeout, "nodes to become idle", *self.procs)

    # ------------------------------------------------------------------ use
    def run(
        self, cmd: Command, check: bool = True, timeout: float = 60, **kwargs
    ) -> subprocess.CompletedProcess:
        """Run a client command (``sbatch …``, ``squeue …``) against the lab."""
        shell = isinstance(cmd, str)
        proc = subprocess.run(
            cmd, shell=shell, env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs
        )
        if check and proc.returncode != 0:
            raise LabError(f"{cmd!r} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def node_run(self, node: str, cmd: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a command inside a node's network namespace (no SLURM involved)."""
        return subprocess.run(
            ["nsenter", f"--net=/run/netns/{self.node_ns[node]}", *cmd],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )

    def login_command(self, cmd: Sequence[str]) -> List[str]:
        """``cmd`` as run on the lab's *login node*: the hub's network namespace, where
        slurmctld runs and which every node reaches at 10.233.0.254 (so a server started
        there, such as an ipyparallel controller, is reachable from the jobs). Run it with
        ``env=lab.env``. In a site's lab it runs under the site's login host name (``arf-ui1``:
        its own UTS namespace), so a job it submits says ``SLURM_SUBMIT_HOST=arf-ui1``."""
        enter = ["nsenter", f"--net=/run/netns/{self.hub_ns}"]
        if self.login_host is None:
            return [*enter, *cmd]
        return [*enter, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.login_host, *cmd]

    def queue(self) -> List[str]:
        """Job ids still pending or running."""
        proc = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=15)
        return proc.stdout.split() if proc.returncode == 0 else []

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for f in sorted(self.path("log").glob("*")) if self.dir.exists() else []:
            try:
                text = f.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if text:
                out.append(f"--- {f.name}\n" + "\n".join(text))
        return "\n".join(out)

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Cancel jobs, stop daemons by PID, delete namespaces, remove the directory."""
        ctl = self.procs.get("slurmctld")
        if ctl is not None and ctl.poll() is None and self.env:
            try:
                jobs = self.queue()  # every user's (a test's other users too)
                if jobs:
                    self.run(["scancel", *jobs], check=False, timeout=15)
                deadline = time.monotonic() + 15
                while self.queue() and time.monotonic() < deadline:
                    time.sleep(0.5)
            except (subprocess.TimeoutExpired, OSError):
                pass
        # slurmd first, all at once: a slurmd whose controller is gone ignores SIGTERM (then it gets 1 s
        # before SIGKILL, not the full grace).
        ctl_alive = ctl is not None and ctl.poll() is None
        _terminate_all([p for k, p in self.procs.items() if k.startswith("slurmd")],
                       KILL_GRACE_S if ctl_alive else 1.0)
        for key in ("slurmctld", "munged"):
            proc = self.procs.get(key)
            if proc is not None:
                _terminate_all([proc])
        # Anything else still living in our namespaces (job steps, slurmstepd).
        for ns in list(self._netns_made):
            _kill_netns_pids(ns)
            _sh(["ip", "netns", "delete", ns], check=False)
            self._netns_made.remove(ns)
        self.procs.clear()
        if self.dir.exists() and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        self._started = False


# ---------------------------------------------------------------------- helpers
def _in_sbin(name: str) -> bool:
    return any(Path(d, name).exists() for d in ("/usr/sbin", "/sbin"))


def _which(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin"):
        if Path(d, name).exists():
            return str(Path(d, name))
    raise LabError(f"{name} not found")


def _terminate_all(procs: Sequence[subprocess.Popen], grace: float = KILL_GRACE_S) -> None:
    """SIGTERM to each of ``procs`` at once, SIGKILL to those still living ``grace`` seconds later."""
    living = [p for p in procs if p.poll() is None]
    for proc in living:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.poll() is None for p in living):
        time.sleep(0.1)
    for proc in living:
        if proc.poll() is None:
            proc.kill()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass


def _kill_netns_pids(ns: str) -> None:
    proc = _sh(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in proc.stdout.split() if p.isdigit()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (3 if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return


def cleanup_stale(base_dir: Optional[str] = None) -> List[str]:
    """Remove namespaces, processes and directories of labs whose owner process is gone.

    Returns what was removed.  Only names this module makes are touched, and a
    process is killed only when it lives in one of those namespaces or its
    command line names the dead lab's directory.
    """
    removed: List[str] = []
    base = Path(base_dir or tempfile.gettempdir())
    proc = _sh(["ip", "netns", "list"], check=False)
    pattern = re.compile(rf"^({PREFIX}(\d+)x[0-9a-f]+)-\w+$")
    for line in proc.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = pattern.match(name)
        if m and not _alive(int(m.group(2))):
            _kill_netns_pids(name)
            _sh(["ip", "netns", "delete", name], check=False)
            removed.append(f"netns {name}")
    for lab in base.glob(f"{TMP_PREFIX}*-*"):
        m = re.match(rf"^{TMP_PREFIX}(\d+)-[0-9a-f]+$", lab.name)
        if not m:
            continue
        try:  # "<pid> <start time>" of the process that made the lab (guards against PID reuse)
            owner_pid, owner_start = (lab / "owner").read_text().split()[:2]
        except (OSError, ValueError):
            owner_pid, owner_start = m.group(1), None
        if _alive(int(owner_pid), owner_start):
            continue
        pidfile = lab / "pids"
        if pidfile.exists():
            for line in pidfile.read_text().splitlines():
                try:
                    pid = int(line.split()[1])
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except (IndexError, ValueError, OSError):
                    continue
                if str(lab).encode() in cmdline:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        removed.append(f"process {pid}")
                    except ProcessLookupError:
                        pass
        shutil.rmtree(lab, ignore_errors=True)
        removed.append(f"dir {lab}")
    return removed


if __name__ == "__main__":  # python tests/helpers/slurmlab.py: start, show, stop
    import sys

    problems = SlurmLab.missing()
    if problems:
        sys.exit("missing: " + "; ".join(problems))
    with SlurmLab(site=sys.argv[1] if len(sys.argv) > 1 else None) as lab:  # [site]: a lab in its shape
        print(f"lab up in {lab.start_seconds:.1f} s at {lab.dir}")
        print(lab.run(["sinfo", "-N", "-l"]).stdout)
        print(lab.run(["srun", "-N2", "-n2", *(["-p", "akya-cuda", "--gres=gpu:1", "-c", "10"] if lab.site else []),
                       "sh", "-c", "echo $(hostname) $SLURM_PROCID"]).stdout)
