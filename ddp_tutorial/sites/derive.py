"""``ddp-tutorial site derive``: a site's table read from the cluster's own SLURM.

On a login node, ``scontrol show config``, ``scontrol show partition -o`` and ``scontrol show node -o`` say
what SLURM knows of each partition: its nodes, their cores (CPUTot), memory (RealMemory), GPUs and their type
(Gres ``gpu:v100:4``), features (-C types), the time limit (MaxTime), the default memory per core
(DefMemPerCPU) and which partition is the default. :func:`table_text` writes that as a site table in
``truba.toml``'s format, so :func:`ddp_tutorial.sites.load` reads it and every consumer works unchanged:

* a ``[derived]`` table instead of ``[guide]`` (where, when, SLURM's version, the commands); every value's
  ``sources`` entry names the command and field it came from (``"scontrol show partition gpu: MaxTime"``);
* what SLURM cannot tell (login nodes and what may run there, per-user core caps, storage rules, the
  minimums a submit plugin enforces) is marked for a person: each table lists it in ``to_fill`` and each such
  line carries ``# TO FILL`` (commented out where there is no value yet);
* ``[day]``, the class's layout, is a proposal to check: sessions on the default partition (or another that
  takes a 4-core job for 3 h), notebook 05's jobs on a GPU partition; what depends on the partitions' minimums
  (the session's cores, the job's GPUs per node) is marked to fill with the rest.

A partition whose nodes differ gets the smallest value, and a comment says how they differ. Never
``squeue``: other users' jobs are none of this command's business. No torch import: this runs on a login node.
"""

from __future__ import annotations

import datetime
import json
import re
import socket
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

#: The commands read, in this order (``[derived] commands`` lists them).
COMMANDS = (("scontrol", "show", "config"), ("scontrol", "show", "partition", "-o"), ("scontrol", "show", "node", "-o"))
#: Seconds each command may take (``--timeout``).
TIMEOUT_S = 20.0
#: The class's layout the ``[day]`` proposal uses (as truba.toml's ``[day]``).
SESSION_CORES, SESSION_TIME, JOB_NODES = 4, "03:00:00", 2
DAY = dict(start="09:00", end="15:00", sessions=[["09:00", "11:45"], ["12:45", "15:00"]], job_gpus_per_node=1,
           job_time="00:15:00", reservation_window=["12:45", "14:30"])

# one `key=value` of a `scontrol -o` line; a value runs to the next key (OS=Linux 6.1 #1 SMP … holds spaces)
_FIELD = re.compile(r"([A-Za-z][\w/]*)=(.*?)(?=\s+[A-Za-z][\w/]*=|\s*$)")
_NONE = ("", "(null)", "none", "n/a", "unlimited", "infinite")


class SlurmUnreadable(Exception):
    """A command could not be read: ``key`` (``site_derive.no_slurm`` …) and the message's fields."""

    def __init__(self, key: str, **fields: object):
        super().__init__(key)
        self.key, self.fields = key, fields


def records(text: str) -> List[Dict[str, str]]:
    """``scontrol show … -o`` text → one dict per line (``{"PartitionName": "gpu", "MaxTime": "3-00:00:00", …}``)."""
    return [{k: v.strip() for k, v in _FIELD.findall(line)} for line in text.splitlines() if "=" in line]


def config(text: str) -> Dict[str, str]:
    """``scontrol show config`` text (``ClusterName             = lab``) → a dict."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found


def gpus(gres: str) -> Tuple[int, List[str]]:
    """A node's ``Gres`` (``gpu:v100:4(S:0-1)``, ``gpu:2``, ``gpu:a100:4,gpu:v100:2``, ``(null)``) → its GPU
    count and the types it names."""
    count, kinds = 0, []
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        number = parts[-1] if parts[-1].isdigit() else "1"
        count += int(number)
        if len(parts) >= 3 and parts[1] not in kinds:
            kinds.append(parts[1])
    return count, kinds


def _given(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() not in _NONE


def _smallest(values: Dict[str, int], what: str) -> Tuple[int, Optional[str]]:
    """The smallest of the nodes' ``values`` and, where they differ, a comment saying how."""
    low = min(values.values())
    if len(set(values.values())) == 1:
        return low, None
    by_value: Dict[int, List[str]] = {}
    for node, value in values.items():
        by_value.setdefault(value, []).append(node)
    said = "; ".join(f"{v} on {', '.join(nodes)}" for v, nodes in sorted(by_value.items(), reverse=True))
    return low, f"nodes differ in {what}: {said}; the smallest"


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


class _Table:
    """One TOML table being written: values with their comments, ``to_fill`` fields, sources."""

    def __init__(self, header: str, comments: Sequence[str] = ()):
        self.header, self.comments = header, [f"# {c}" for c in comments]
        self.lines: List[str] = []
        self.to_fill: List[str] = []
        self.sources: Dict[str, str] = {}

    def set(self, name: str, value, source: Optional[str] = None, comment: Optional[str] = None) -> None:
        self.lines.append(f"{_key(name)} = {_toml(value)}" + (f"   # {comment}" if comment else ""))
        if source:
            self.sources[name] = source

    def fill(self, name: str, why: str, value=None, source: Optional[str] = None) -> None:
        """A field for a person: its proposed ``value`` (None: a commented-out line) and why it is to fill."""
        self.to_fill.append(name)
        if value is None:
            self.lines.append(f"# {name} = ?   # TO FILL: {why}")
        else:
            self.set(name, value, source, f"TO FILL: {why}")

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def text(self) -> str:
        out = [f"[{self.header}]", *self.comments]
        if self.to_fill:
            out.append(f"to_fill = {_toml(self.to_fill)}   # TO FILL: write each value, then take its name out")
        out += self.lines
        if self.sources:
            out.append(f"sources = {_toml(self.sources)}")
        return "\n".join(out)


def _partition_table(part: Dict[str, str], nodes: List[Dict[str, str]]) -> Tuple[_Table, dict]:
    """The ``[partitions.<name>]`` table of one partition and the values the ``[day]`` proposal needs."""
    name = part["PartitionName"]
    members = part.get("Nodes", "")
    on_part = f"scontrol show partition {name}"
    on_nodes = f"scontrol show node {members}" if members else "scontrol show node"
    table = _Table(f"partitions.{_key(name)}")
    facts: dict = dict(name=name, default=part.get("Default") == "YES")
    if facts["default"]:
        table.set("default", True, comment="SLURM's default partition (Default=YES)")
    facts["nodes"] = len(nodes) if nodes else int(part.get("TotalNodes", "0") or 0)
    table.set("nodes", facts["nodes"], f"{on_part}: TotalNodes")
    if nodes:
        facts.update(_node_sizes(table, nodes, on_nodes))
        _node_types(table, nodes, on_nodes)
    _time_and_memory(table, part, facts, on_part)
    _access(table, part)
    _minimums(table, part, facts, on_part, on_nodes)
    return table, facts


def _node_sizes(table: _Table, nodes: List[Dict[str, str]], on_nodes: str) -> dict:
    """The nodes' cores (CPUTot), GPUs and their type (Gres) and memory (RealMemory): the smallest where they
    differ. Returns ``cores`` and ``gpus`` for the facts."""
    cores, why = _smallest({n["NodeName"]: int(n.get("CPUTot", "0") or 0) for n in nodes}, "cores (CPUTot)")
    table.set("cores_per_node", cores, f"{on_nodes}: CPUTot", why)
    per_node = {n["NodeName"]: gpus(n.get("Gres", "")) for n in nodes}
    count, why = _smallest({k: v[0] for k, v in per_node.items()}, "GPUs (Gres)")
    table.set("gpus_per_node", count, f"{on_nodes}: Gres", why)
    kinds = list(dict.fromkeys(k for _, ks in per_node.values() for k in ks))
    if count and kinds:
        table.set("gpu", " / ".join(kinds), f"{on_nodes}: Gres")
    elif count:
        table.comment("the GRES names no GPU type (gpu:N): the model is not stated")
    memory = {n["NodeName"]: int(n.get("RealMemory", "0") or 0) // 1024 for n in nodes}
    if any(memory.values()):
        value, why = _smallest(memory, "memory (RealMemory)")
        table.set("memory_gb", value, f"{on_nodes}: RealMemory", why)
    return dict(cores=cores, gpus=count)


def _node_types(table: _Table, nodes: List[Dict[str, str]], on_nodes: str) -> None:
    """The features that tell the nodes apart (``-C`` picks among them); features every node has are a comment."""
    features = [[f for f in n.get("AvailableFeatures", "").split(",") if _given(f)] for n in nodes]
    common = set(features[0]).intersection(*features[1:])
    types = list(dict.fromkeys(f for fs in features for f in fs if f not in common))
    if types:
        table.set("constraints", types, f"{on_nodes}: AvailableFeatures", "-C picks among these node types")
    elif common:
        table.comment(f"every node has the feature(s) {', '.join(sorted(common))}: no -C choice within it")


def _time_and_memory(table: _Table, part: Dict[str, str], facts: dict, on_part: str) -> None:
    """The time limit (MaxTime) and the memory a job gets per core without ``--mem`` (DefMemPerCPU, or
    DefMemPerNode shared by the node's cores)."""
    if _given(part.get("MaxTime")):
        table.set("max_time", part["MaxTime"], f"{on_part}: MaxTime")
        facts["max_time"] = part["MaxTime"]
    else:
        table.comment("MaxTime=UNLIMITED: no time limit")
    if _given(part.get("DefMemPerCPU")):
        table.set("mem_per_core_mb", int(part["DefMemPerCPU"]), f"{on_part}: DefMemPerCPU")
    elif _given(part.get("DefMemPerNode")) and facts.get("cores"):
        table.set("mem_per_core_mb", int(part["DefMemPerNode"]) // facts["cores"],
                  f"{on_part}: DefMemPerNode", f"DefMemPerNode={part['DefMemPerNode']} shared by the node's cores")


def _access(table: _Table, part: Dict[str, str]) -> None:
    """Who may use the partition and its state, as comments where they are not ALL / UP."""
    for key in ("AllowAccounts", "AllowGroups", "State"):
        value = part.get(key)
        if value and value not in ("ALL", "UP"):
            table.comment(f"{key}={value}")


def _minimums(table: _Table, part: Dict[str, str], facts: dict, on_part: str, on_nodes: str) -> None:
    """What a submit plugin may enforce, for a person to fill: cores per GPU (proposed from SLURM's default or
    the node's even share), the least GPUs per job, GPU-only, the least cores per job."""
    if not facts.get("gpus"):
        table.set("gpu_only", False, comment="no GPUs")
        table.fill("min_cores", "the least cores per job a submit plugin enforces (SLURM does not say)")
        return
    defaults = dict(item.split("=", 1) for item in part.get("JobDefaults", "").split(",") if "=" in item)
    if "DefCpuPerGPU" in defaults:
        table.fill("cores_per_gpu", "SLURM's default (JobDefaults DefCpuPerGPU); the minimum, if any, is the "
                   "centre's", int(defaults["DefCpuPerGPU"]), f"{on_part}: JobDefaults DefCpuPerGPU")
    else:
        share = facts["cores"] // facts["gpus"]
        table.fill("cores_per_gpu", f"the node's {facts['cores']} cores shared evenly by its {facts['gpus']} "
                   "GPUs; check the centre's rule", share, f"{on_nodes}: CPUTot / Gres")
    table.fill("min_gpus", "the least GPUs per job a submit plugin enforces (1 on most GPU partitions)")
    table.fill("gpu_only", "true if the partition runs only jobs that ask for GPUs")
    table.fill("min_cores", "the least cores per job a submit plugin enforces (SLURM does not say)")


def _day(partitions: List[dict]) -> _Table:
    """The ``[day]`` proposal: sessions on the default partition when it takes a 4-core job for 3 h (else the
    first partition without GPUs that does), notebook 05's jobs on the first GPU partition with 2 nodes."""
    from ..slurm.rules import time_limit_seconds

    def takes_a_session(p: dict) -> bool:
        long_enough = "max_time" not in p or time_limit_seconds(p["max_time"]) >= time_limit_seconds(SESSION_TIME)
        return long_enough and p.get("cores", SESSION_CORES) >= SESSION_CORES

    ordered = sorted(partitions, key=lambda p: not p["default"])
    session = next((p for p in ordered if takes_a_session(p) and (p["default"] or not p.get("gpus"))), None)
    gpu = [p for p in partitions if p.get("gpus")]
    job = next((p for p in gpu if p["nodes"] >= JOB_NODES), gpu[0] if gpu else None)
    table = _Table("day", ["TO FILL (a proposal to check): the class's layout for a day at this site, not a rule",
                           "of the site. `ddp-tutorial site plan --site THIS_FILE` shows its arithmetic."])
    table.set("start", DAY["start"])
    table.set("end", DAY["end"])
    if session:
        table.fill("session_partition", f"JupyterLab sessions: {SESSION_CORES} cores for {SESSION_TIME} fit here",
                   session["name"])
    else:
        table.fill("session_partition", f"no partition takes a {SESSION_CORES}-core job for {SESSION_TIME}")
    # the partitions' minimum cores and GPUs per job are a submit plugin's, to fill: what must meet them is too
    table.fill("session_cores", "the session partition's minimum cores per job is not known (SLURM does not say): "
               "at least that many", SESSION_CORES)
    table.set("session_time", SESSION_TIME)
    table.set("sessions", DAY["sessions"])
    if job:
        table.fill("job_partition", "notebook 05's jobs: a GPU partition (open to the workshop's account?)",
                   job["name"])
    else:
        table.fill("job_partition", "no partition has GPUs")
    table.set("job_nodes", JOB_NODES)
    table.fill("job_gpus_per_node", "the job partition's minimum GPUs and cores per job are not known (SLURM does "
               "not say): the job must meet them", DAY["job_gpus_per_node"])
    table.set("job_time", DAY["job_time"])
    table.fill("reservation_window", "when the centre reserves GPU nodes for 05 and 08", DAY["reservation_window"])
    if job:
        table.set("reservation_partitions", [job["name"]])
    return table


def table_text(partition_text: str, node_text: str, config_text: str, *, host: str, date: str,
               name: Optional[str] = None) -> str:
    """The site table (TOML) from the three commands' text, read on ``host`` on ``date``."""
    from ..day_plan import ACCOUNT_TYPES
    conf = config(config_text)
    cluster = name or conf.get("ClusterName") or "site"
    nodes = records(node_text)
    head = [
        f"# {cluster}'s site table, read from its SLURM by `ddp-tutorial site derive` on {host}, {date}.",
        "# Every value is what SLURM says; `sources` names the command and field. Lines marked TO FILL are what",
        "# SLURM cannot tell (each table's `to_fill` lists them): write the value, take its name out of `to_fill`.",
        "# `ddp-tutorial site show --site THIS_FILE` lists what is still to fill; then DDP_TUTORIAL_SITE=THIS_FILE.",
        "",
    ]
    derived = _Table("derived")
    derived.set("host", host)
    derived.set("date", date)
    derived.set("slurm_version", conf.get("SLURM_VERSION", "?"))
    derived.set("commands", [" ".join(c) for c in COMMANDS])
    site = _Table("site")
    site.set("name", cluster)
    site.set("title", cluster)  # a name: site show says in the reader's language where the table came from
    login = _Table("login", ["Login nodes: submit jobs from here, never run JupyterLab, engines or training."])
    login.fill("hosts", "the host this ran on; add the other login nodes", [host.split(".")[0]])
    login.fill("address", "the address a laptop reaches (for the tunnel line)")
    login.fill("may_run", "what may run on a login node, in the centre's words (English)")
    login.fill("may_run_tr", "the same in Turkish")
    caps = _Table("caps", ["Cores one user may hold at once (the centre, or sacctmgr show assoc: MaxTRESPerUser)."])
    for kind in ACCOUNT_TYPES:  # the account types `site plan` weighs the day against
        caps.fill(kind, f"cores one {kind} account may hold at once")
    storage = _Table("storage", ["The centre's storage rules."])
    storage.fill("outputs", "where --output / --error must be written, if the centre says (e.g. /scratch/$USER)")
    storage.fill("no_pip_on", "a file system where pip / conda installs are forbidden, if any")
    storage.fill("home_mode", "the mode home directories must keep (e.g. 700), if the centre says")
    tables, facts = [], []
    for part in records(partition_text):
        members = [n for n in nodes if part["PartitionName"] in n.get("Partitions", "").split(",")]
        table, fact = _partition_table(part, members)
        tables.append(table)
        facts.append(fact)
    body = [derived, site, login, caps, storage, *tables, _day(facts)]
    return "\n".join(head) + "\n" + "\n\n".join(t.text() for t in body) + "\n"


def run_commands(timeout: float = TIMEOUT_S) -> Tuple[str, str, str]:
    """The text of ``scontrol show config / partition -o / node -o`` on this host (:class:`SlurmUnreadable`
    when ``scontrol`` is missing, fails or does not answer within ``timeout`` seconds)."""
    out = []
    for command in COMMANDS:
        said = " ".join(command)
        try:
            proc = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmUnreadable("site_derive.no_slurm") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnreadable("site_derive.silent", command=said, seconds=round(timeout)) from None
        if proc.returncode != 0:
            why = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
            raise SlurmUnreadable("site_derive.failed", command=said, why=why)
        out.append(proc.stdout)
    config_text, partition_text, node_text = out
    if not records(partition_text):
        raise SlurmUnreadable("site_derive.no_partitions", command=" ".join(COMMANDS[1]))
    return partition_text, node_text, config_text


def derive(name: Optional[str] = None, timeout: float = TIMEOUT_S) -> str:
    """This cluster's site table (TOML text), read now on this host."""
    partition_text, node_text, config_text = run_commands(timeout)
    return table_text(partition_text, node_text, config_text, host=socket.gethostname(),
                      date=datetime.date.today().isoformat(), name=name)


__all__ = ["SlurmUnreadable", "config", "derive", "gpus", "records", "run_commands", "table_text"]
