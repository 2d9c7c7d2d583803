"""A class of N attendees on the SLURM lab: real non-root users, each with a home (mode 700) and a clone.

Issue 45 item 4 (shared/reviews/class-day.md §2, rebuilt as code). Used by ``tests/test_class_rehearsal.py``
(N = 4) and ``scripts/rehearse_class.py`` (N = 30); both run :func:`rehearse`.

* :func:`class_lab` — the rule-enforcing lab in the site's shape (``SlurmLab(site=...)``, TRUBA's by default:
  its partitions, cores, GPUs, time limits and job_submit.lua) sized for the class from the table's ``[day]``:
  nodes of the session partition for the sessions (where that partition spans mixed nodes, as TRUBA's debug,
  the smallest CPU node type: barbun), nodes of the day's job partition (akya-cuda) for the class
  reservation. The test uses the suite's ``truba_lab``; tests/test_site_shape2.py a lab from another table.
* :func:`class_environment` — ``/work/main/.venv`` if another user can run its Python; else (its Python
  links into a private home, review P1) a venv over the machine's world-readable ``/usr/bin/python3``
  that reads the checkout's venv's packages (a ``.pth`` line), the same packages, built in seconds.
* :class:`Classroom` — the users (``useradd -m``, GECOS ``ddp-tutorial classroom <pid> <start>`` so a
  later run removes the users of a run that died), their clones, commands run *as* them on the lab's
  login node (the hub namespace: ``nsenter`` as root first, then ``setpriv`` to the user), and the end:
  each user's processes killed by id, ``userdel -r``.
* :class:`PortSampler` — ``ss -ltnp`` in every node's namespace and the login node's, every second: which
  users hold each (node, port) at one moment; and what the class runs on the login node besides SLURM clients.
* :func:`session_access` — who gets into a session: its owner with the address file's token; not the next
  attendee (cannot read the file; 403 without the token).
* :func:`submit_fifth_job` — 05's job as 05's cells [2] and [4] build it (``slurm.workshop_profile``,
  ``JobSpec.from_profile``, or the package's ``slurm.class_job`` where it has it; ``render``,
  ``write_script``, ``check_accepted``, ``submit``) in the class's shape (``[day]`` of the site table) and
  the class's account and reservation (DDP_TUTORIAL_SLURM_*),
  run inside the attendee's session (``srun --jobid=LAB --overlap``) as
  ``python tests/helpers/classroom.py submit-05``. The lab's GPUs are stand-ins that cannot train: the
  rendered script's training runs on the CPU with 1 thread and its GPU check is skipped; the #SBATCH lines
  are untouched (the class-day review's deviation 2). :func:`fifth_job` is the one place the job is built.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurmlab import SlurmLab, _alive, _stat  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GECOS = "ddp-tutorial classroom"
ACCOUNT = "ddpclass"
URL_LINES = re.compile(r"ssh -N -L (\d+):(\S+):\1 (\S+)@\S+\n== (?:then open the address in|sonra) (\S+) ")


# ---------------------------------------------------------------------- the lab in the site's shape
#: memory one running 05 job takes here, both halves (class-day.md §2: 1.45–1.72 GB PSS)
JOB_MEMORY_GB = 1.5
#: the site whose table the class follows when none is named (``run_class(site=...)``, ``--site``)
DEFAULT_SITE = "truba"


def class_site(site: str = DEFAULT_SITE):
    """The site table the class follows: a shipped site's name or a TOML file (:func:`ddp_tutorial.sites.load`)."""
    from ddp_tutorial import sites
    return sites.load(str(site))


def session_nodes_partition(site) -> str:
    """The partition whose nodes hold the day's sessions: ``[day] session_partition`` when the table gives its
    nodes' cores; else (a partition over mixed node types, TRUBA's debug) the CPU partition with the smallest
    nodes among those the table sizes."""
    day = site.section("day")
    own = site.partitions[day["session_partition"]]
    if own.cores_per_node:
        return own.name
    cpu = [p for p in site.partitions.values() if p.cores_per_node and not p.gpus_per_node]
    return min(cpu, key=lambda p: p.cores_per_node).name


def _available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def gpu_nodes_for(attendees: int, limit: int, site=None) -> int:
    """Nodes of the day's job partition for the class reservation: enough for every 05 job at once (the
    site's [day]: TRUBA's 1 GPU and 10 cores per node each on akya-cuda), at most ``limit``, and no more
    than this machine's free memory runs."""
    site = site or class_site()
    day = site.section("day")
    part = site.partitions[day["job_partition"]]
    per_node = min(part.gpus_per_node // day["job_gpus_per_node"],
                   part.cores_per_node // ((part.cores_per_gpu or 1) * day["job_gpus_per_node"]))
    wanted = -(-attendees * day["job_nodes"] // per_node)
    by_memory = int(max(0.0, _available_gb() - 4) // (JOB_MEMORY_GB / day["job_nodes"] * per_node))
    return max(day["job_nodes"], min(wanted, limit, by_memory))


def class_lab(attendees: int, gpu_nodes: Optional[int] = None, site: str = DEFAULT_SITE) -> SlurmLab:
    """The rule-enforcing lab in ``site``'s shape (``SlurmLab(site=site)``) sized for a class: nodes for the
    sessions (:func:`session_nodes_partition`; the day's session cores each), nodes of the day's job
    partition for the reservation."""
    table = class_site(site)
    day = table.section("day")
    holder = session_nodes_partition(table)
    sessions = max(1, -(-attendees * day["session_cores"] // table.partitions[holder].cores_per_node))
    gpus = gpu_nodes or gpu_nodes_for(attendees, 16 - sessions, table)
    return SlurmLab(site=str(site), shape={holder: sessions, day["job_partition"]: gpus})


def reserved_nodes(lab: SlurmLab, attendees: int, site=None) -> List[str]:
    """The lab's nodes of the day's job partition (TRUBA: akya-cuda) that the class reservation takes (the
    sessions run on the others)."""
    nodes = lab.partitions[(site or class_site()).section("day")["job_partition"]]
    others = [n for n in lab.node_names if n not in nodes]
    return nodes if others else nodes[:max(2, len(nodes) // 2)]


# ---------------------------------------------------------------------- the class environment
def runs_as_another_user(python: Path) -> bool:
    """Can uid 65534 run ``python -c 1`` (the interpreter and every folder on its way)?"""
    if shutil.which("setpriv") is None:
        return False
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
                           f'"{python}" -I -c 1'], capture_output=True, timeout=60)
    return proc.returncode == 0


def class_environment(dest: Path, source: Path = REPO / ".venv") -> Tuple[Path, str]:
    """The class environment every attendee can run, and how it was found: ``source`` itself, or a
    venv at ``dest`` over /usr/bin/python3 reading ``source``'s packages (read-only for the attendees)."""
    if runs_as_another_user(source / "bin" / "python"):
        return source, f"{source} (its Python runs as another user)"
    base = Path("/usr/bin/python3")
    if not runs_as_another_user(base):
        raise RuntimeError(f"neither {source}/bin/python nor {base} runs as another user: no class environment")
    version = subprocess.run([str(source / "bin" / "python"), "-c",
                              "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')"],
                             capture_output=True, text=True, check=True).stdout.strip()
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    site_packages = dest / "lib" / version / "site-packages"
    if not site_packages.is_dir():
        raise RuntimeError(f"{base} is not {version}, the version of {source}: no class environment")
    (site_packages / "class_environment.pth").write_text(
        f"import site; site.addsitedir({str(source / 'lib' / version / 'site-packages')!r})\n")
    # The venv's programs (jupyter, ipengine, ddp-tutorial …) with this environment's Python.
    shebang = f"#!{source}/bin/python"
    for script in sorted((source / "bin").iterdir()):
        target = dest / "bin" / script.name
        if target.exists() or script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as f:
            first = f.readline()
        if first.strip() != shebang.encode():
            continue
        target.write_bytes(f"#!{dest}/bin/python\n".encode() + script.read_bytes()[len(first):])
        target.chmod(0o755)
    for name in ("share", "etc"):  # JupyterLab's assets, extensions and server configuration
        if (source / name).is_dir():
            (dest / name).symlink_to(source / name)
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(dest)], check=True)
    if not runs_as_another_user(dest / "bin" / "python"):
        raise RuntimeError(f"{dest}/bin/python does not run as another user")
    return dest, (f"{dest} (a venv over {base} reading {source}'s packages: {source}/bin/python links into a "
                  "private home)")


# ---------------------------------------------------------------------- the attendees
@dataclass
class Attendee:
    name: str
    uid: int
    gid: int
    home: Path
    lang: str
    lab_job: str = ""
    lab_submitted: float = 0.0
    url_seen: float = 0.0
    session: Dict[str, str] = field(default_factory=dict)   # node, port, url file
    fifth_job: str = ""
    fifth_output: str = ""
    failed: str = ""   # the session's log, when it ended before its address lines

    @property
    def clone(self) -> Path:
        return self.home / "ddp-tutorial"


def _owner_mark() -> str:
    return f"{GECOS} {os.getpid()} {_stat(os.getpid())[19]}"


def cleanup_stale_users() -> List[str]:
    """Remove the users (and their processes) of a classroom whose owning process is gone."""
    removed = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) < 7 or not fields[4].startswith(GECOS + " "):
            continue
        try:
            pid, start = fields[4][len(GECOS) + 1:].split()[:2]
            if _alive(int(pid), start):
                continue
        except ValueError:
            pass
        kill_user_processes(int(fields[2]))
        subprocess.run(["userdel", "-r", "-f", fields[0]], capture_output=True, timeout=60)
        removed.append(fields[0])
    return removed


def user_processes(uids: Set[int]) -> Dict[int, Tuple[int, str]]:
    """{pid: (uid, command line)} of every living process owned by one of ``uids``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
            if uid not in uids or not _alive(int(entry.name)):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found[int(entry.name)] = (uid, cmd[:200])
    return found


def kill_user_processes(uid: int) -> int:
    """SIGKILL, by id, each process owned by ``uid`` (a test user's); how many there were."""
    pids = list(user_processes({uid}))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


class Classroom:
    """N attendees on ``lab``; a context manager whose end removes the users whatever happened."""

    def __init__(self, lab: SlurmLab, attendees: int, venv: Path, data_root: str, reservation: str,
                 extra_env: Optional[Dict[str, str]] = None, site_file: Optional[str] = None):
        self.lab, self.venv, self.data_root, self.reservation = lab, venv, data_root, reservation
        self.extra_env = dict(extra_env or {})
        #: the class's site (DDP_TUTORIAL_SITE): a shipped site's name or a TOML file every attendee can read;
        #: None: the default, TRUBA's, with no DDP_TUTORIAL_SITE (as the class day has it)
        self.site_file = site_file
        self.site = class_site(site_file or DEFAULT_SITE)
        self.count = attendees
        self.tag = secrets.token_hex(2)
        self.attendees: List[Attendee] = []

    def __enter__(self) -> "Classroom":
        cleanup_stale_users()
        try:
            self._create_users()
            with ThreadPoolExecutor(max_workers=min(8, self.count)) as pool:
                list(pool.map(self._clone, self.attendees))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def uids(self) -> Set[int]:
        return {a.uid for a in self.attendees}

    def _create_users(self) -> None:
        mark = _owner_mark()
        for i in range(1, self.count + 1):
            name = f"c{self.tag}a{i:02d}"
            proc = subprocess.run(["useradd", "-m", "-s", "/bin/bash", "-c", mark, name],
                                  capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                raise RuntimeError(f"useradd {name}: {proc.stderr.strip()}")
            import pwd
            entry = pwd.getpwnam(name)
            home = Path(entry.pw_dir)
            home.chmod(0o700)  # the site's rule: the home is open only to its owner
            self.attendees.append(Attendee(name, entry.pw_uid, entry.pw_gid, home, "tr" if i % 2 else "en"))

    def environment(self, a: Attendee) -> Dict[str, str]:
        """The attendee's login environment: the lab's clients, and the class's variables (never SBATCH_*):
        the profile and GPUs of the site's [day] job, the class's account and reservation, and the site's
        table (DDP_TUTORIAL_SITE) where it is not the default one."""
        day = self.site.section("day")
        site = {"DDP_TUTORIAL_SITE": self.site_file} if self.site_file else {}
        return {
            "HOME": str(a.home), "USER": a.name, "LOGNAME": a.name, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
            "PATH": f"{self.lab.path('bin')}:/usr/local/bin:/usr/bin:/bin",
            "SLURM_CONF": self.lab.env["SLURM_CONF"],
            "DDP_TUTORIAL_LANG": a.lang, "DDP_TUTORIAL_VENV": str(self.venv),
            "DDP_TUTORIAL_ROOT": self.data_root, "DDP_TUTORIAL_DATASET": "mnist",
            "DDP_TUTORIAL_SLURM_PROFILE": day["job_partition"],
            "DDP_TUTORIAL_SLURM_GPUS": str(day["job_gpus_per_node"]),
            "DDP_TUTORIAL_SLURM_ACCOUNT": ACCOUNT, "DDP_TUTORIAL_SLURM_RESERVATION": self.reservation, **site,
            **{k: v.replace("{reservation}", self.reservation) for k, v in self.extra_env.items()},
        }

    def as_user(self, a: Attendee, script: str, timeout: float = 120,
                extra: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """``bash -c script`` as the attendee on the lab's login node (the site's first login host: TRUBA's
        ``arf-ui1``), from their home."""
        env = [f"{k}={v}" for k, v in {**self.environment(a), **(extra or {})}.items()]
        argv = self.lab.login_command(["setpriv", f"--reuid={a.uid}", f"--regid={a.gid}", "--init-groups",
                                       "env", "-i", *env, "bash", "-c", f"cd && {script}"])
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def _clone(self, a: Attendee) -> None:
        (a.home / ".gitconfig").write_text(f"[safe]\n\tdirectory = {REPO}\n\tdirectory = {REPO}/.git\n")
        os.chown(a.home / ".gitconfig", a.uid, a.gid)
        proc = self.as_user(a, f"git clone -q --no-hardlinks {REPO} ddp-tutorial")
        if proc.returncode != 0:
            raise RuntimeError(f"git clone as {a.name}: {proc.stderr.strip()}")

    def close(self) -> None:
        for a in self.attendees:
            self.lab.run(["scancel", f"--user={a.name}"], check=False, timeout=30)
        for a in self.attendees:
            kill_user_processes(a.uid)
        for a in self.attendees:
            proc = subprocess.run(["userdel", "-r", "-f", a.name], capture_output=True, text=True, timeout=60)
            if proc.returncode not in (0, 12):  # 12: the home could not be removed (said on stderr)
                print(f"userdel {a.name}: {proc.stderr.strip()}", file=sys.stderr)
        self.attendees = []


# ---------------------------------------------------------------------- ports
#: What an attendee runs on the login node: the shell, the SLURM clients, the way in (setpriv, env, unshare).
LOGIN_COMMANDS = frozenset({"bash", "sh", "env", "setpriv", "unshare", "nsenter",
                            "sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo"})


#: Marks the test's own probes (the attendee's browser, in truth on their laptop) among the login node's processes.
PROBE_MARK = "DDP_CLASSROOM_PROBE=1"


def _environ(pid: int) -> Optional[List[bytes]]:
    """A process's environment; None when it is gone (a zombie's reads empty)."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return data.split(b"\0") if data else None


class PortSampler:
    """Every ``every`` seconds, ``ss -Hltnp`` in each node's namespace and the login node's: which users
    hold which (node, port) at that moment. Two users on one (node, port) in the same sample is a
    collision; one port held by one user and later by another (an ephemeral port used again) is counted
    apart, as ``reused``. Each sample also lists the class's processes on the login node that are not
    SLURM clients or a shell (``login_work``: nothing of the class computes there, T5-1)."""

    SS_USER = re.compile(r'\("([^"]*)",pid=(\d+)')

    def __init__(self, lab: SlurmLab, uids: Set[int], every: float = 1.0):
        self.lab, self.uids, self.every = lab, uids, every
        self.owners: Dict[Tuple[str, str], Set[str]] = {}      # (node, port) → {"uid:command"} over the day
        self.together: Dict[Tuple[str, str], Set[str]] = {}    # (node, port) → users in one same sample
        self.login_work: Set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "PortSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _sample_ports(self, node: str, ns: str) -> None:
        try:
            out = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "ss", "-Hltnp"],
                                 capture_output=True, text=True, timeout=20).stdout
        except (subprocess.TimeoutExpired, OSError):
            return
        now: Dict[Tuple[str, str], Set[str]] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 4:
                continue
            port = parts[3].rsplit(":", 1)[-1]
            for command, pid in self.SS_USER.findall(line):
                try:
                    uid = Path(f"/proc/{pid}").stat().st_uid
                except OSError:
                    continue
                if uid in self.uids:
                    now.setdefault((node, port), set()).add(f"{uid}:{command}")
        for key, holders in now.items():
            self.owners.setdefault(key, set()).update(holders)
            if len({h.split(":")[0] for h in holders}) > 1:
                self.together.setdefault(key, set()).update(holders)

    def _sample_login(self, login_net: str) -> None:
        for pid in user_processes(self.uids):
            try:
                if os.readlink(f"/proc/{pid}/ns/net") != login_net:
                    continue
                command = Path(f"/proc/{pid}/comm").read_text().strip()
                uid = Path(f"/proc/{pid}").stat().st_uid
            except OSError:
                continue
            environ = _environ(pid)  # read last: a process gone by now is no answer either way
            if command not in LOGIN_COMMANDS and environ is not None and PROBE_MARK.encode() not in environ:
                self.login_work.add(f"{uid}:{command}")

    def _run(self) -> None:
        namespaces = {"login": self.lab.hub_ns, **self.lab.node_ns}
        login_net = f"net:[{os.stat(f'/run/netns/{self.lab.hub_ns}').st_ino}]"
        while not self._stop.is_set():
            for node, ns in namespaces.items():
                self._sample_ports(node, ns)
            self._sample_login(login_net)
            self.samples += 1
            self._stop.wait(self.every)

    def collisions(self) -> Dict[str, List[str]]:
        """(node, port) held by two users at one moment."""
        return {f"{node}:{port}": sorted(held) for (node, port), held in self.together.items()}

    def reused(self) -> Dict[str, List[str]]:
        """(node, port) held by two users one after the other (never at one moment)."""
        return {f"{node}:{port}": sorted(held) for (node, port), held in self.owners.items()
                if len({h.split(":")[0] for h in held}) > 1 and (node, port) not in self.together}


# ---------------------------------------------------------------------- 05's job, inside a session
def fake_gpus(script: str) -> str:
    """The lab's stand-in GPUs cannot train: the training on the CPU, 1 thread; no GPU check. The #SBATCH
    lines stay as rendered (the class's shape is what is tested)."""
    changed, n1 = re.subn(r"--device cuda --threads \d+", "--device cpu --threads 1", script)
    changed, n2 = re.subn(r'(?m)^"\$PYTHON" -m ddp_tutorial\.gpu .*$',
                          'echo "GPU check skipped: the lab\'s GPUs are stand-ins (tests/helpers/classroom.py)"',
                          changed)
    changed = re.sub(r"(?m)^export OMP_NUM_THREADS=\d+", "export OMP_NUM_THREADS=1", changed)
    if n1 != 1 or n2 != 1:
        raise RuntimeError(f"05's rendered job changed: {n1} device line(s), {n2} GPU check line(s) found")
    return changed


def fifth_job(environ, run_dir: Path, python: str, train_subset: int):
    """05's job in the class's shape, as the attendee's kernel builds it (05's cells [2] and [4]): the
    profile from DDP_TUTORIAL_SLURM_PROFILE, GPUs from DDP_TUTORIAL_SLURM_GPUS, account and reservation
    from the class's DDP_TUTORIAL_SLURM_ACCOUNT / _RESERVATION, nodes and time from the site's [day].
    Where the package has the class's own job function (``slurm.class_job``), that builds it. The site is
    DDP_TUTORIAL_SITE's, else TRUBA's."""
    from ddp_tutorial import sites, slurm
    day = (sites.current(environ) or class_site()).section("day")
    name = slurm.workshop_profile(environ)
    common = dict(template="seed", nodes=day["job_nodes"], time=day["job_time"], job_name="ddp-seed",
                  dataset=environ.get("DDP_TUTORIAL_DATASET", "mnist"), root=environ["DDP_TUTORIAL_ROOT"],
                  epochs=1, python=python, train_args=("--train-subset", str(train_subset)))
    if hasattr(slurm, "class_job"):
        folder = slurm.class_run_dir("notebook-05", default=run_dir.parent, environ=environ)
        return name, slurm.class_job(environ=environ, run_dir=folder, **common)
    profile = slurm.PROFILES[name]
    gpus = int(environ.get("DDP_TUTORIAL_SLURM_GPUS", day["job_gpus_per_node"]))
    return name, slurm.JobSpec.from_profile(
        name, gpus_per_node=gpus, nproc_per_node=gpus or 3, cpus_per_process=profile.cpus_per_gpu if gpus else 1,
        run_dir=str(run_dir), account=environ.get("DDP_TUTORIAL_SLURM_ACCOUNT") or None,
        reservation=environ.get("DDP_TUTORIAL_SLURM_RESERVATION") or None, **common)


def submit_fifth_job(train_subset: int) -> int:
    """Inside the session: build, write, try (--test-only) and submit 05's job; print ``SUBMITTED <id>``."""
    from ddp_tutorial import slurm
    from ddp_tutorial.i18n import TutorialError
    run_dir = Path.cwd() / "runs" / "notebook-05"
    try:
        name, job = fifth_job(os.environ, run_dir, sys.executable, train_subset)
        print(slurm.preview(job, profile=name))
        path = slurm.write_script(fake_gpus(slurm.render(job)), Path(job.run_dir) / "seed.sbatch")
        print(slurm.check_accepted(path, job))
        print("SUBMITTED", slurm.submit(path))
    except TutorialError as error:
        print(error)
        return 1
    return 0


# ---------------------------------------------------------------------- the rehearsal
def accuracy_pattern() -> re.Pattern:
    """The training's accuracy line in either language (messages train.accuracy)."""
    from ddp_tutorial import i18n
    ways = []
    for lang in ("en", "tr"):
        text = re.escape(i18n.messages(lang)["train.accuracy"])  # numbers as the language writes them (10.000)
        ways.append(text.replace(re.escape("{n}"), r"\d[\d.,]*").replace(re.escape("{acc:.2f}"), r"\d[\d.,]*"))
    return re.compile("|".join(ways))


def job_fields(lab: SlurmLab, job: str) -> Dict[str, str]:
    out = lab.run(["scontrol", "-o", "show", "job", job], check=False, timeout=30).stdout
    return dict(token.partition("=")[::2] for token in out.split() if "=" in token)


def job_end(lab: SlurmLab, job: str, seconds: float = 150) -> Tuple[Dict[str, str], str]:
    """Wait (at most ``seconds``) until ``job`` has left the queue: its ``scontrol show job`` fields and its log."""
    deadline = time.monotonic() + seconds
    while job in lab.queue() and time.monotonic() < deadline:
        time.sleep(1)
    info = job_fields(lab, job)
    log = Path(info.get("StdOut", ""))
    return info, log.read_text(errors="replace") if log.is_file() else f"(no log {log})"


def _epoch(stamp: str) -> Optional[float]:
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


def at_once(jobs) -> int:
    """The most jobs running at one moment, from their StartTime and EndTime (an end before a start in the
    same second: SLURM starts a waiting job when another ends)."""
    events = sorted((_epoch(j[key]) or 0, step) for j in jobs for key, step in (("start", 1), ("end", -1)))
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def _wait(what: str, ok, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = ok()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


#: As an attendee on the login node: GET a session's api/status, with the token of an address file (argv 1, or
#: none when argv 1 is "-") or without one; print the HTTP status (0: no answer).
STATUS_PROBE = r"""
import sys, urllib.error, urllib.parse, urllib.request
node, port, url_file = sys.argv[2], sys.argv[3], sys.argv[1]
token = ""
if url_file != "-":
    url = open(url_file).read().strip()
    token = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["token"][0]
try:
    with urllib.request.urlopen(f"http://{node}:{port}/api/status?token={token}", timeout=20) as answer:
        print(answer.status)
except urllib.error.HTTPError as error:
    print(error.code)
except OSError:
    print(0)
"""


def session_access(room: Classroom, owner: Attendee, other: Attendee) -> List[str]:
    """What is wrong with who reaches ``owner``'s session: the owner with the address file's token gets 200;
    ``other`` cannot read that file and gets 403 without a token (empty: all as it should be). The probes
    stand in for a browser behind the tunnel, so they run from the login node marked as probes."""
    node, port, url_file = owner.session["node"], owner.session["port"], owner.session["url_file"]
    # the node's address from the lab's hosts file (the lab's login namespace has the machine's /etc/hosts)
    hosts = dict(reversed(line.split()[:2]) for line in room.lab.path("etc", "hosts").read_text().splitlines()
                 if len(line.split()) >= 2)
    node = hosts.get(node, node)
    wrong = []
    probe = dict([PROBE_MARK.split("=")])
    own = room.as_user(owner, f"python3 -c '{STATUS_PROBE}' {url_file} {node} {port}", timeout=60, extra=probe)
    if own.stdout.strip() != "200":
        wrong.append(f"{owner.name} with the token of {url_file}: {own.stdout.strip() or own.stderr.strip()[-300:]}")
    if other is owner:
        return wrong
    read = room.as_user(other, f"cat {url_file}", timeout=30)
    if read.returncode == 0:
        wrong.append(f"{other.name} read {owner.name}'s address file {url_file}")
    bare = room.as_user(other, f"python3 -c '{STATUS_PROBE}' - {node} {port}", timeout=60, extra=probe)
    if bare.stdout.strip() != "403":
        wrong.append(f"{other.name} without a token at {owner.name}'s {node}:{port}: {bare.stdout.strip()}")
    return wrong


#: slurm/lab.sbatch's own #SBATCH lines that make the day's session: [day] field → the line's option
SESSION_LINES = {"session_partition": "--partition", "session_cores": "--cpus-per-task", "session_time": "--time"}


def session_command(site) -> str:
    """How an attendee starts the day's session (``[day]``): the kit's ``sbatch slurm/lab.sbatch`` where its
    #SBATCH lines are that session (TRUBA: debug, 4 cores, 03:00:00), else with the site's partition, cores and
    time on the command line, as lab.sbatch's header says for another site (sbatch's options win over the lines)."""
    lines = dict(re.findall(r"(?m)^#SBATCH (--[a-z-]+)=(\S+)", (REPO / "slurm" / "lab.sbatch").read_text()))
    day = site.section("day")
    options = "".join(f" {option}={day[key]}" for key, option in SESSION_LINES.items()
                      if lines.get(option) != str(day[key]))
    return f"sbatch --parsable{options} slurm/lab.sbatch"


def rehearse(lab: SlurmLab, room: Classroom, train_subset: int = 512, say=print) -> dict:
    """The day for every attendee at once (class-day.md §2): sessions, 05's jobs in the reservation, the
    drain, the end of day. Returns the numbers; the caller asserts on them."""
    n = len(room.attendees)
    day = room.site.section("day")
    numbers: dict = {"attendees": n, "venv": str(room.venv), "site": room.site.name,
                     "session_partition": day["session_partition"], "job_partition": day["job_partition"],
                     "session_command": session_command(room.site), "refused": [], "lab_jobs": {}, "fifth_jobs": {}}
    refusal_words = ["Batch job submission failed", "error:"]
    if getattr(lab, "site", None) is not None:  # the job_submit.lua's words, for each partition's rules
        import job_submit
        refusal_words += [line for part in lab.partitions
                          for line in job_submit.words(lab.site, lab.site.partitions[part]).values()]
    with PortSampler(lab, room.uids) as ports, ThreadPoolExecutor(max_workers=n) as pool:
        # 09:00 — every attendee: cd ~/ddp-tutorial && sbatch slurm/lab.sbatch (+ the site's session options)
        def start(a: Attendee):
            a.lab_submitted = time.monotonic()
            proc = room.as_user(a, f"cd ~/ddp-tutorial && {numbers['session_command']}")
            if proc.returncode != 0 or any(w in proc.stderr for w in refusal_words):
                numbers["refused"].append(f"{a.name} lab.sbatch ({proc.returncode}): {proc.stderr.strip()}")
                return
            a.lab_job = proc.stdout.strip().split(";")[0]
        list(pool.map(start, room.attendees))

        def url(a: Attendee):
            log = a.clone / f"lab-{a.lab_job}.out"
            text = log.read_text(errors="replace") if log.exists() else ""
            found = URL_LINES.search(text)
            if found:
                a.url_seen = time.monotonic()
                a.session = {"port": found.group(1), "node": found.group(2), "url_file": found.group(4)}
                return True
            if a.lab_job not in lab.queue():
                a.failed = text[-1500:] or f"(no log {log})"
                return True
            return False
        waiting = [a for a in room.attendees if a.lab_job]
        _wait("every session's address lines",
              lambda: all([a.url_seen or a.failed or url(a) for a in waiting]), 60 + 15 * n)  # each, every pass
        numbers["sessions_failed"] = {a.name: a.failed for a in waiting if a.failed}
        waiting = [a for a in waiting if not a.failed]
        numbers["sessions_ready_s"] = sorted(round(a.url_seen - a.lab_submitted, 1) for a in waiting)
        if not waiting:
            raise RuntimeError("no session started: " + json.dumps(numbers["sessions_failed"] or numbers["refused"],
                                                                    ensure_ascii=False)[:3000])
        for a in waiting:
            info = job_fields(lab, a.lab_job)
            numbers["lab_jobs"][a.name] = {k: info.get(k, "") for k in ("JobState", "Partition", "Reservation",
                                                                         "NodeList", "NumCPUs", "TimeLimit")}
            numbers["lab_jobs"][a.name].update(lang=a.lang, **a.session)
        # each session: its owner gets in with the address file's token; the next attendee neither reads that
        # file nor gets in without the token (P6 for a whole class on shared nodes)
        neighbours = waiting[1:] + waiting[:1]
        numbers["session_access"] = [line for wrong in pool.map(lambda pair: session_access(room, *pair),
                                                                 zip(waiting, neighbours)) for line in wrong]
        say(f"{len(waiting)} sessions up, {len(numbers['sessions_failed'])} ended before their address lines; "
            f"address lines after {numbers['sessions_ready_s']} s; "
            f"{len(numbers['session_access'])} wrong answer(s) on who gets into a session")

        # 12:45 — 05's job from inside each session, all at once
        def fifth(a: Attendee):
            proc = room.as_user(a, f"cd ~/ddp-tutorial && srun --jobid={a.lab_job} --overlap -N1 -n1 "
                                   f'"$DDP_TUTORIAL_VENV/bin/python" {Path(__file__).resolve()} submit-05 '
                                   f"--train-subset {train_subset}", timeout=180)
            a.fifth_output = proc.stdout + proc.stderr
            found = re.search(r"^SUBMITTED (\d+)$", proc.stdout, re.M)
            if proc.returncode != 0 or not found or any(w in a.fifth_output for w in refusal_words):
                numbers["refused"].append(f"{a.name} 05's job ({proc.returncode}): {a.fifth_output.strip()[-1500:]}")
                return
            a.fifth_job = found.group(1)
        list(pool.map(fifth, waiting))
        jobs = {a.fifth_job: a for a in waiting if a.fifth_job}

        def drained():
            states = {j: job_fields(lab, j).get("JobState", "") for j in jobs}
            return all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
                       for s in states.values())
        _wait("05's jobs to end", drained, 300 + 60 * n, every=2.0)
        accuracy = accuracy_pattern()
        for job, a in jobs.items():
            info = job_fields(lab, job)
            log = Path(info.get("StdOut", "") or a.clone / "runs" / "notebook-05" / f"slurm-{job}.out")
            text = log.read_text(errors="replace") if log.exists() else ""
            line = accuracy.search(text)
            numbers["fifth_jobs"][job] = {
                "user": a.name, "lang": a.lang, "state": info.get("JobState", ""), "exit": info.get("ExitCode", ""),
                "partition": info.get("Partition", ""), "reservation": info.get("Reservation", ""),
                "nodes": info.get("NodeList", ""), "num_nodes": info.get("NumNodes", ""),
                "gpus_per_node": info.get("TresPerNode", ""), "cpus_per_task": info.get("CPUs/Task", ""),
                "tasks": info.get("NumTasks", ""),
                "submit": info.get("SubmitTime", ""), "start": info.get("StartTime", ""),
                "end": info.get("EndTime", ""), "accuracy_line": line.group(0) if line else "",
                "address_in_use": "Address already in use" in text, "log_tail": "" if line else text[-2000:]}
        submits = [_epoch(j["submit"]) for j in numbers["fifth_jobs"].values()]
        ends = [_epoch(j["end"]) for j in numbers["fifth_jobs"].values()]
        if submits and ends and None not in submits + ends:
            numbers["drain_s"] = max(ends) - min(submits)
            numbers["max_wait_s"] = max(_epoch(j["start"]) - _epoch(j["submit"])
                                        for j in numbers["fifth_jobs"].values())
        numbers["fifth_running_at_once"] = at_once(numbers["fifth_jobs"].values())
        say(f"05's jobs: {len(jobs)} submitted, drain {numbers.get('drain_s')} s (first submit → last end), "
            f"at most {numbers['fifth_running_at_once']} running at once (from their start and end times)")

    # 15:00 — the end of day, the kit's way: each attendee lists their jobs and cancels them
    def end_of_day(a: Attendee):
        listed = room.as_user(a, "squeue --me -h -o %i").stdout.split()
        if listed:
            room.as_user(a, "scancel " + " ".join(listed))
        return listed
    numbers["processes_before_end"] = len(user_processes(room.uids))
    with ThreadPoolExecutor(max_workers=n) as pool:
        cancelled = time.monotonic()
        listed = list(pool.map(end_of_day, room.attendees))
    names = {a.name for a in room.attendees}

    def nothing_left():
        queued = [line for line in lab.run(["squeue", "-h", "-o", "%i %u"], check=False).stdout.splitlines()
                  if line.split()[-1:] and line.split()[-1] in names]
        return not queued and not user_processes(room.uids)
    try:
        _wait("the class's processes and jobs to end", nothing_left, 30, every=0.25)
    except TimeoutError:
        pass
    numbers["end_of_day_s"] = round(time.monotonic() - cancelled, 1)
    numbers["jobs_listed_at_end"] = sum(len(x) for x in listed)
    numbers["processes_left"] = [f"{pid} {uid} {cmd}" for pid, (uid, cmd) in user_processes(room.uids).items()]
    numbers["jobs_left"] = [line for line in lab.run(["squeue", "-h", "-o", "%i %u %j"], check=False)
                            .stdout.splitlines() if line.split()[1:2] and line.split()[1] in names]
    numbers["port_pairs"] = len(ports.owners)
    numbers["port_samples"] = ports.samples
    numbers["port_collisions"] = ports.collisions()
    numbers["ports_reused"] = ports.reused()
    numbers["login_work"] = sorted(ports.login_work)
    say(f"end of day: {numbers['jobs_listed_at_end']} job(s) cancelled by their owners; "
        f"{len(numbers['processes_left'])} process(es), {len(numbers['jobs_left'])} job(s) left after "
        f"{numbers['end_of_day_s']} s; {numbers['port_pairs']} (node, port) pairs in {ports.samples} samples, "
        f"{len(numbers['port_collisions'])} held by two users at once ({len(numbers['ports_reused'])} used again by "
        f"another user later); class processes on the login node other than SLURM clients: "
        f"{', '.join(numbers['login_work']) or 'none'}")
    return numbers


def run_class(attendees: int, train_subset: int = 512, say=print, lab: Optional[SlurmLab] = None,
              gpu_nodes: Optional[int] = None, venv: Optional[Path] = None,
              extra_env: Optional[Dict[str, str]] = None, site: str = DEFAULT_SITE) -> dict:
    """Everything: the lab (unless given: a site lab such as the ``truba_lab`` fixture), the class
    environment, the users, the reservation, the day. The scratch folder (the class environment, if one is
    built) is one every user can enter; it is removed after, as the users and the reservation are.
    ``venv`` and ``extra_env`` (added to every attendee's environment; ``{reservation}`` in a value is the
    class reservation's name) rehearse a variant: another class environment, the old kit's SBATCH_* lines.
    ``site``: the site table the day follows (a shipped site's name, or a TOML file: copied into the scratch
    folder for the attendees to read, and named to them by DDP_TUTORIAL_SITE); a given ``lab`` must have
    that table's day partitions."""
    scratch = Path(tempfile.mkdtemp(prefix="ddp-classroom-"))
    own_lab = lab is None
    try:
        scratch.chmod(0o755)
        table = class_site(site)
        site_file = None if site == DEFAULT_SITE else site  # a shipped site's name: DDP_TUTORIAL_SITE=<name>
        if str(site).endswith(".toml") or os.sep in str(site):  # a file: a copy every attendee can read
            site_file = str(scratch / "site.toml")
            shutil.copyfile(site, site_file)
            os.chmod(site_file, 0o644)
        venv, how = (venv, f"{venv} (given)") if venv else class_environment(scratch / "class-venv")
        say(f"class environment: {how}")
        data_root = os.environ.get("DDP_TUTORIAL_ROOT") or str(REPO / ".data")
        if subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls", data_root],
                          capture_output=True, timeout=60).returncode != 0:
            raise RuntimeError(f"the data root {data_root} (DDP_TUTORIAL_ROOT) is not readable by another user: "
                               "give the class a data root every attendee can read")
        if own_lab:
            lab = class_lab(attendees, gpu_nodes, site).start()
            say(f"lab in {table.short_name}'s shape: " + ", ".join(f"{part} {', '.join(nodes)}" for part, nodes
                                                                  in lab.partitions.items() if part != "debug")
                + ("; debug over every node" if "debug" in lab.partitions else "")
                + f"; up in {lab.start_seconds:.1f} s")
        return _run_class(lab, attendees, venv, data_root, train_subset, say, extra_env, site_file)
    finally:
        if own_lab and lab is not None:
            lab.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _run_class(lab: SlurmLab, attendees: int, venv: Path, data_root: str, train_subset: int, say,
               extra_env, site_file: Optional[str] = None) -> dict:
    began = time.monotonic()
    reservation = f"class-{secrets.token_hex(2)}"
    site = class_site(site_file or DEFAULT_SITE)
    partition = site.section("day")["job_partition"]
    nodes = reserved_nodes(lab, attendees, site)
    with Classroom(lab, attendees, venv, data_root, reservation, extra_env, site_file) as room:
        say(f"{attendees} users with homes (700) and clones in {time.monotonic() - began:.1f} s")
        lab.run(["scontrol", "create", "reservation", f"ReservationName={reservation}", "StartTime=now",
                 "Duration=02:00:00", f"Nodes={','.join(nodes)}",
                 f"Users={','.join(a.name for a in room.attendees)}", f"PartitionName={partition}"])
        try:
            numbers = rehearse(lab, room, train_subset=train_subset, say=say)
        finally:
            lab.run(["scontrol", "delete", f"ReservationName={reservation}"], check=False)
        numbers["reservation"] = {"name": reservation, "nodes": nodes}
    numbers["wall_s"] = round(time.monotonic() - began, 1)
    return numbers


def write_numbers(numbers: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.{os.getpid()}")
    fresh.write_text(json.dumps(numbers, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(fresh, path)


if __name__ == "__main__":  # inside an attendee's session: python tests/helpers/classroom.py submit-05
    import argparse
    parser = argparse.ArgumentParser(description="05's job from inside an attendee's session (the class rehearsal)")
    parser.add_argument("what", choices=["submit-05"])
    parser.add_argument("--train-subset", type=int, default=512)
    sys.exit(submit_fifth_job(parser.parse_args().train_subset))
