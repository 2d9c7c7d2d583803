"""What a DDP script expects from its launcher, and which of its lines only run on a GPU — read from its
source, without running or importing it (no torch here: ``slurm render`` and ``check-script`` answer at once).

A DDP script is written for one *convention*, the way it learns who it is:

* ``torchrun`` — reads ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (or calls ``init_process_group`` with no
  rank: ``env://``); fits torchrun, ``slurm render --template torchrun`` or ``per-gpu``, ``ipp.run_script``;
* ``slurm`` — reads ``SLURM_PROCID``/``SLURM_LOCALID`` … and not ``RANK``; fits one SLURM task per process
  (``--template per-gpu``) and ``ipp.run_script`` (which then sets the SLURM names);
* ``either`` — reads both sets: fits all of them;
* ``per-node`` — starts its own processes (``mp.spawn``), like the seed's per-node parent: one task per
  node, ``--template per-gpu --nproc-per-node 1``;
* ``unknown`` — reads none of these: nothing to check (every process may think it is rank 0).

Under the torchrun template a ``slurm`` script hangs (``SLURM_PROCID`` is then the *node*'s number:
two processes per node both say "rank 0"), so :func:`template_problem` refuses it at render time.
The findings (:func:`read_script`) are the lines a CUDA-only script changes to run on a CPU too
(docs/own-script.md): ``set_device``, ``device_ids``, ``.to(local_rank)`` / ``.cuda()``, a hard-coded
``"nccl"``, a ``device_count()`` assert, ``--local_rank`` (torch.distributed.launch), and a process group
that is never destroyed.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from . import launch_env as names
from .i18n import TutorialError, t

# What a script reads tells its convention: the launcher variables of launch_env (the one list).
TORCHRUN_NAMES = (names.RANK, names.LOCAL_RANK, names.WORLD_SIZE, names.LOCAL_WORLD_SIZE)
SLURM_NAMES = (names.SLURM_PROCID, names.SLURM_LOCALID, names.SLURM_NTASKS, names.SLURM_NPROCS, names.SLURM_NODEID,
               names.SLURM_NTASKS_PER_NODE, names.SLURM_NNODES)


def _quoted(name: str) -> re.Pattern:
    return re.compile(r"""(?<![A-Za-z0-9_])["']""" + name + r"""["']""")


_TORCHRUN = {name: _quoted(name) for name in TORCHRUN_NAMES}
_SLURM = {name: _quoted(name) for name in SLURM_NAMES}
_SPAWNS = re.compile(r"\b(mp|multiprocessing|torch\.multiprocessing)\.(spawn|start_processes)\s*\(|"
                     r"^\s*from\s+torch\.multiprocessing\s+import\s+.*\bspawn\b")
_INIT = re.compile(r"\binit_process_group\s*\(")
_DESTROY = re.compile(r"\bdestroy_process_group\s*\(")
_GUARD = re.compile(r"cuda\.is_available\s*\(|device\.type|\.type\s*==\s*['\"]cuda|device_count\s*\(|"
                    r"use_cuda|has_cuda|\bcuda\b\s*(?:and|if)")

# (finding, pattern): the lines a CUDA-only script changes; "guarded" ones (inside an `if` that asks
# for a GPU, or with the question on the same line) are already right.
_CUDA_LINES: Tuple[Tuple[str, re.Pattern], ...] = (
    ("set_device", re.compile(r"\bcuda\.set_device\s*\(")),
    ("device_ids", re.compile(r"\bdevice_ids\s*=|\boutput_device\s*=")),
    ("nccl", re.compile(r"""["']nccl["']""")),
    ("device_count_assert", re.compile(r"^\s*assert\b.*device_count\s*\(")),
    ("cuda_call", re.compile(r"\bcuda\.(synchronize|current_device|max_memory_allocated|memory_allocated|"
                             r"get_device_name|get_device_properties)\s*\(")),
    ("to_cuda", re.compile(r"""\.cuda\s*\(|\.to\s*\(\s*(?:f?["']cuda|(?:self\.)?(?:local_rank|gpu_id|gpu|rank|"""
                           r"""device_id|local_gpu)\s*[,)])|\btorch\.device\s*\(\s*f?["']cuda|=\s*f?["']cuda(?::[^"']*)?["']""")),
    ("local_rank_arg", re.compile(r"""add_argument\s*\(\s*["']--local[_-]rank""")),
)


#: The message of each finding and each convention (literal keys: grep finds every use).
_FINDING_KEYS = {
    "set_device": "script.finding_set_device", "device_ids": "script.finding_device_ids",
    "nccl": "script.finding_nccl", "device_count_assert": "script.finding_device_count_assert",
    "to_cuda": "script.finding_to_cuda", "local_rank_arg": "script.finding_local_rank_arg",
    "no_destroy": "script.finding_no_destroy", "cuda_call": "script.finding_cuda_call",
}
_CONVENTION_KEYS = {
    "torchrun": "script.convention_torchrun", "slurm": "script.convention_slurm",
    "either": "script.convention_either", "per-node": "script.convention_per_node",
    "unknown": "script.convention_unknown",
}


@dataclass(frozen=True)
class Finding:
    line: int
    kind: str     # a key of _FINDING_KEYS
    code: str     # the line, stripped

    def describe(self, lang: Optional[str] = None) -> str:
        return t(_FINDING_KEYS[self.kind], lang)


@dataclass
class ScriptReport:
    path: str
    torchrun_names: List[str] = field(default_factory=list)
    slurm_names: List[str] = field(default_factory=list)
    spawns: bool = False
    inits: bool = False
    findings: List[Finding] = field(default_factory=list)

    @property
    def convention(self) -> str:
        if self.spawns:
            return "per-node"
        reads_slurm = any(n in self.slurm_names for n in ("SLURM_PROCID", "SLURM_LOCALID"))
        reads_torchrun = any(n in self.torchrun_names for n in ("RANK", "LOCAL_RANK"))
        if reads_slurm and reads_torchrun:
            return "either"
        if reads_slurm:
            return "slurm"
        if self.torchrun_names or self.inits:
            return "torchrun"
        return "unknown"

    def fitting(self) -> str:
        """The launch that fits, as a command-line fragment."""
        return {"torchrun": "--template torchrun", "either": "--template torchrun",
                "slurm": "--template per-gpu", "per-node": "--template per-gpu --nproc-per-node 1",
                "unknown": "--template torchrun"}[self.convention]


def _guarded(lines: List[str], index: int) -> bool:
    """Is line ``index`` inside an ``if``/``elif``/``else`` block that asks for a GPU (or does it ask itself)?"""
    line = lines[index]
    if _GUARD.search(line):
        return True
    indent = len(line) - len(line.lstrip())
    for j in range(index - 1, -1, -1):
        text = lines[j]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        own = len(text) - len(text.lstrip())
        if own < indent:
            header = text.strip()
            if header.startswith(("if ", "elif ", "else")) and _GUARD.search(header):
                return True
            if header.startswith("else") or header.startswith("elif "):
                # the else of an `if torch.cuda.is_available():` above, at the same indentation
                for k in range(j - 1, -1, -1):
                    other = lines[k]
                    if other.strip() and len(other) - len(other.lstrip()) == own and \
                            other.strip().startswith(("if ", "elif ")):
                        if _GUARD.search(other):
                            return True
                        if other.strip().startswith("if "):
                            break
            if header.startswith(("def ", "class ", "async def ")):
                return False
            indent = own
    return False


def _without_comments(source: str) -> List[str]:
    """The source's lines with every comment blanked (a ``# 'nccl' or 'gloo'`` note is not code); the lines
    as they are when it does not tokenize."""
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [("" if line.lstrip().startswith("#") else line) for line in lines]
    for token in reversed(tokens):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            if row - 1 < len(lines):
                lines[row - 1] = lines[row - 1][:col].rstrip()
    return lines


def read_source(source: str, path: str = "<script>") -> ScriptReport:
    """The report for a script's text."""
    report = ScriptReport(path=path)
    code = _without_comments(source)
    text = "\n".join(code)
    report.torchrun_names = [n for n, p in _TORCHRUN.items() if p.search(text)]
    report.slurm_names = [n for n, p in _SLURM.items() if p.search(text)]
    report.spawns = any(_SPAWNS.search(line) for line in code)
    report.inits = bool(_INIT.search(text))
    for index, line in enumerate(code):
        if not line.strip():
            continue
        for kind, pattern in _CUDA_LINES:
            if not pattern.search(line):
                continue
            if kind == "nccl" and "gloo" in line:  # "nccl" if … else "gloo": already chosen with the device
                break
            if kind in ("local_rank_arg", "device_count_assert") or not _guarded(code, index):
                report.findings.append(Finding(index + 1, kind, line.strip()))
                break
    if report.inits and not _DESTROY.search(text):
        first = next(i for i, line in enumerate(code) if _INIT.search(line))
        report.findings.append(Finding(first + 1, "no_destroy", code[first].strip()))
    report.findings.sort(key=lambda f: f.line)
    return report


def read_script(path) -> ScriptReport:
    """The report for the script at ``path`` (a clear error when it cannot be read)."""
    file = Path(path)
    if not file.is_file():
        raise TutorialError("script.no_file", path=str(path))
    try:
        source = file.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise TutorialError("script.unreadable", path=str(path), why=error.strerror or error) from None
    return read_source(source, str(path))


def template_problem(report: ScriptReport, template: str, processes_per_node: int) -> Optional[str]:
    """The message (in the user's language) that refuses ``template`` for this script, or None when it fits."""
    convention = report.convention
    if convention == "slurm" and template == "torchrun":
        return t("script.slurm_under_torchrun", path=report.path,
                 names=", ".join(n for n in report.slurm_names))
    if convention == "per-node" and (template == "torchrun" or processes_per_node != 1):
        return t("script.per_node_needs_one_task", path=report.path, template=template,
                 nproc=processes_per_node)
    return None


def template_warning(report: ScriptReport) -> Optional[str]:
    """A warning for a script that reads no launcher variable at all (it may not be a DDP script)."""
    if report.convention == "unknown":
        return t("script.reads_nothing", path=report.path)
    return None


def describe(report: ScriptReport, lang: Optional[str] = None) -> str:
    """``ddp-tutorial check-script``'s text: the convention, the launch that fits, each line to change."""
    out = [t("script.header", lang, path=report.path),
           t(_CONVENTION_KEYS[report.convention], lang,
             names=", ".join(report.torchrun_names + report.slurm_names) or "-"),
           t("script.fits", lang, launch=report.fitting())]
    if report.findings:
        out.append(t("script.to_change", lang, n=len(report.findings)))
        for finding in report.findings:
            out.append(f"  {report.path}:{finding.line}: {finding.code}")
            out.append(f"      → {finding.describe(lang)}")
    else:
        out.append(t("script.nothing_to_change", lang))
    out.append(t("script.see_page", lang))
    return "\n".join(out)
