"""What a DDP script expects from its launcher, and which of its lines only run on a GPU — read from its
source, without running or importing it (no torch here: ``slurm render`` and ``check-script`` answer at once).

A DDP script is written for one *convention*, the way it learns who it is:

* ``torchrun`` — reads ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (or calls ``init_process_group`` with no
  rank: ``env://``); fits torchrun, ``slurm render --template torchrun`` or ``per-gpu``, ``ipp.run_script``;
* ``slurm`` — reads ``SLURM_PROCID``/``SLURM_LOCALID`` … and not ``RANK``; fits one SLURM task per process
  (``--template per-gpu``) and ``ipp.run_script`` (which then sets the SLURM names);
* ``either`` — reads both sets; the one read first wins (``if "SLURM_PROCID" in os.environ: …``). RANK
  first fits every launcher; SLURM_PROCID first fits ``per-gpu`` and ``ipp.run_script`` (srun's and
  torchrun's numbers agree there), not the torchrun template (its workers inherit one SLURM_PROCID);
* ``per-node`` — starts its own processes (``mp.spawn``), like the seed's per-node parent: one task per
  node, ``--template per-gpu --nproc-per-node 1``;
* ``unknown`` — reads none of these: nothing to check (every process may think it is rank 0).

Under the torchrun template a ``slurm`` script, or an ``either`` one that reads SLURM_PROCID first, hangs (two
processes per node both say "rank 0"): :func:`template_problem` refuses it at render time. A name only
printed or logged, or written (``os.environ["RANK"] = …``), is not where the script learns its rank.
The findings (:func:`read_script`) are the lines a CUDA-only script changes to run on a CPU too
(docs/own-script.md): ``set_device``, ``device_ids``, ``.cuda()``, a GPU number used as a device
(``.to(local_rank)``, ``device=args.gpu``, or passed to a function that does so), a hard-coded ``"nccl"``,
a ``device_count()`` assert, ``--local_rank`` (torch.distributed.launch), a process group never destroyed.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from . import launch_env as names
from .i18n import TutorialError, t
from .script_trial import RUN_SECONDS, Trial
from .script_tree import NUMBER, SLURM_NAMES, TORCHRUN_NAMES, Tree


def _quoted(name: str) -> re.Pattern:
    return re.compile(r"""(?<![A-Za-z0-9_])["']""" + name + r"""["']""")


_TORCHRUN = {name: _quoted(name) for name in TORCHRUN_NAMES}
_SLURM = {name: _quoted(name) for name in SLURM_NAMES}
_SPAWNS = re.compile(r"\b(mp|multiprocessing|torch\.multiprocessing)\.(spawn|start_processes)\s*\(|"
                     r"^\s*from\s+torch\.multiprocessing\s+import\s+.*\bspawn\b")
_INIT = re.compile(r"\binit_process_group\s*\(")
_DESTROY = re.compile(r"\bdestroy_process_group\s*\(")
# A line that asks for a GPU: is_available(), a device's type, a count of GPUs compared ("device_count() > 0",
# not "nprocs=device_count()": used as a count it is 0 on a CPU), or a device name compared with "cuda".
_GUARD = re.compile(r"cuda\.is_available\s*\(|device\.type|\.type\s*==\s*['\"]cuda|use_cuda|has_cuda|"
                    r"\buse_gpu\b|\bhas_gpu\b|"
                    r"\bcuda\b\s*(?:and|if)|device_count\s*\(\s*\)\s*(?:[<>]=?|[!=]=|\bor\b)|"
                    r"(?:[<>]=?|[!=]=|\bor)\s*(?:\w+\.)*device_count\s*\(|"
                    r"[!=]=\s*f?[\"']cuda|[\"']cuda[^\"']*[\"']\s*(?:[!=]=|(?:not\s+)?in\b)|startswith\s*\(\s*[\"']cuda")

# (finding, pattern): the lines a CUDA-only script changes; "guarded" ones (inside an `if` that asks
# for a GPU, or with the question on the same line) are already right.
_CUDA_LINES: Tuple[Tuple[str, re.Pattern], ...] = (
    ("set_device", re.compile(r"\bcuda\.set_device\s*\(")),
    ("device_ids", re.compile(r"\bdevice_ids\s*=|\boutput_device\s*=")),
    ("nccl", re.compile(r"""["']nccl["']""")),
    ("device_count_assert", re.compile(r"^\s*assert\b.*device_count\s*\(")),
    ("cuda_call", re.compile(r"\bcuda\.(synchronize|current_device|max_memory_allocated|memory_allocated|"
                             r"get_device_name|get_device_properties)\s*\(")),
    ("to_cuda", re.compile(r"""\.cuda\s*\(|\.to\s*\(\s*(?:f?["']cuda|(?:\w+\.)*""" + NUMBER + r"""\s*[,)])|"""
                           r"""\bdevice\s*=(?!=)\s*(?:\w+\.)*""" + NUMBER + r"""\s*[,)]|"""
                           r"""\btorch\.device\s*\(\s*f?["']cuda|(?<![=!<>])=\s*f?["']cuda(?::[^"']*)?["']""")),
    ("local_rank_arg", re.compile(r"""add_argument\s*\(\s*["']--local[_-]rank""")),
    # SLURM sets these only for a job that asks for GPUs (--gres): read with [] they are a KeyError on CPU nodes
    ("gpu_variable", re.compile(r"""environ\s*\[\s*["']SLURM_(?:GPUS_ON_NODE|GPUS_PER_NODE|JOB_GPUS|STEP_GPUS)["']"""
                                r"""\s*\](?!\s*=[^=])""")),
)


#: The message of each finding and each convention (literal keys: grep finds every use).
_FINDING_KEYS = {
    "set_device": "script.finding_set_device", "device_ids": "script.finding_device_ids",
    "nccl": "script.finding_nccl", "device_count_assert": "script.finding_device_count_assert",
    "to_cuda": "script.finding_to_cuda", "local_rank_arg": "script.finding_local_rank_arg",
    "no_destroy": "script.finding_no_destroy", "cuda_call": "script.finding_cuda_call",
    "device_number_arg": "script.finding_device_number_arg", "device_count_count": "script.finding_device_count_count",
    "gpu_variable": "script.finding_gpu_variable", "default_nccl": "script.finding_default_nccl",
    "default_cuda": "script.finding_default_cuda",
}
_DEFAULT_KINDS = {"nccl": "default_nccl", "cuda": "default_cuda"}
_CONVENTION_KEYS = {
    "torchrun": "script.convention_torchrun", "slurm": "script.convention_slurm",
    "either": "script.convention_either", "either-slurm-first": "script.convention_either_slurm_first",
    "per-node": "script.convention_per_node",
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
    slurm_first: bool = False  # both sets read, and SLURM_PROCID/SLURM_LOCALID before RANK/LOCAL_RANK
    findings: List[Finding] = field(default_factory=list)
    defaults: List[Finding] = field(default_factory=list)  # "nccl"/"cuda" as defaults the command line overrides
    trial: Optional[Trial] = None  # how its start here on the CPU went (check-script --run)

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
        if self.convention == "either" and self.slurm_first:
            return "--template per-gpu"  # srun's and torchrun's numbers agree there
        return {"torchrun": "--template torchrun", "either": "--template torchrun",
                "slurm": "--template per-gpu", "per-node": "--template per-gpu --nproc-per-node 1",
                "unknown": "--template torchrun"}[self.convention]


def _guarded_lines(lines: List[str]) -> List[bool]:
    """For every line: is it inside an ``if``/``elif``/``else`` block that asks for a GPU (or does it ask
    itself)? One pass: a stack of the enclosing headers (each line is the header of the more indented lines
    after it), each knowing whether it or a header around it, up to the nearest ``def``/``class``, asks."""
    guarded = [False] * len(lines)
    stack: List[Tuple[int, bool]] = []  # (indentation, guarded inside it), indentations increasing
    chain: Dict[int, bool] = {}         # indentation → an if/elif of the current chain there asks for a GPU
    for index, line in enumerate(lines):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        asks = bool(_GUARD.search(line))
        around = stack[-1][1] if stack else False
        guarded[index] = asks or around
        # as a header: an if/elif/else that asks, or the else/elif of an if (elif) that asked, guards its block
        header_asks = text.startswith(("if ", "elif ", "else")) and asks or \
            text.startswith(("else", "elif ")) and chain.get(indent, False)
        if text.startswith(("if ", "elif ")):
            chain[indent] = asks or text.startswith("elif ") and chain.get(indent, False)
        stack.append((indent, header_asks or around and not text.startswith(("def ", "class ", "async def "))))
    return guarded


def _without_comments(source: str) -> List[str]:
    """The source's lines with every comment and docstring blanked (a ``# 'nccl' or 'gloo'`` note, or a
    docstring that shows ``.cuda()``, is not code); the lines as they are when it does not tokenize."""
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [("" if line.lstrip().startswith("#") else line) for line in lines]
    previous = tokenize.NEWLINE
    for token in tokens:
        if token.type == tokenize.COMMENT:
            row, col = token.start
            if row - 1 < len(lines):
                lines[row - 1] = lines[row - 1][:col].rstrip()
        elif token.type == tokenize.STRING and previous in _STATEMENT_START:  # a string on its own: a docstring
            for row in range(token.start[0], min(token.end[0], len(lines)) + 1):
                lines[row - 1] = ""
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return lines


_STATEMENT_START = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


def _slurm_first(reads: Dict[str, Tuple[int, int]]) -> bool:
    """Both sets read: is srun's rank (or local rank) read before torchrun's — the one that wins?"""
    pairs = [(names.SLURM_PROCID, names.RANK), (names.SLURM_LOCALID, names.LOCAL_RANK),
             (names.SLURM_PROCID, names.LOCAL_RANK), (names.SLURM_LOCALID, names.RANK)]
    both = [(slurm, torchrun) for slurm, torchrun in pairs if slurm in reads and torchrun in reads]
    return bool(both) and reads[both[0][0]] < reads[both[0][1]]


def _names_read(report: ScriptReport, text: str, tree: Optional[Tree]) -> None:
    """The launcher names the script reads, and whether srun's rank is read before torchrun's."""
    if tree is not None:
        reads = tree.reads()
    else:  # not Python we can parse: any quoted name counts, in the order of the text
        reads = {n: (m.start(), 0) for n, p in {**_TORCHRUN, **_SLURM}.items() for m in [p.search(text)] if m}
    report.torchrun_names = [n for n in _TORCHRUN if n in reads]
    report.slurm_names = [n for n in _SLURM if n in reads]
    report.slurm_first = _slurm_first(reads)


def _line_findings(code: List[str], tree: Optional[Tree]) -> Tuple[List[Finding], List[Finding]]:
    """The lines a CUDA-only script changes, each with its first kind that is not already guarded; and the
    defaults that choose a GPU, which the command line overrides (not lines to change)."""
    numbers = tree.numbers() if tree is not None else set()
    by_tree: Dict[int, List[str]] = {}
    for kind, lines in (("to_cuda", tree.number_devices(numbers) if tree else ()),
                        ("device_number_arg", tree.number_arguments(numbers) if tree else ()),
                        ("device_count_count", tree.device_counts() if tree else ())):
        for line in lines:
            by_tree.setdefault(line, []).append(kind)
    defaults = tree.defaults() if tree is not None else {}
    guarded = _guarded_lines(code)
    findings, notes = [], []
    for index, line in enumerate(code):
        if index + 1 in defaults:
            notes.append(Finding(index + 1, _DEFAULT_KINDS[defaults[index + 1]], line.strip()))
            continue
        kinds = [kind for kind, pattern in _CUDA_LINES if pattern.search(line)] if line.strip() else []
        for kind in kinds + by_tree.get(index + 1, []):
            if kind == "nccl" and "gloo" in line:  # "nccl" if … else "gloo": already chosen with the device
                break
            if kind in ("local_rank_arg", "device_count_assert") or not guarded[index]:
                findings.append(Finding(index + 1, kind, line.strip()))
                break
    return findings, notes


def read_source(source: str, path: str = "<script>") -> ScriptReport:
    """The report for a script's text."""
    report = ScriptReport(path=path)
    code = _without_comments(source)
    text = "\n".join(code)
    try:
        tree = Tree.of(source)
        _names_read(report, text, tree)
        report.findings, report.defaults = _line_findings(code, tree)
    except RecursionError:  # a tree nested too deeply to walk: the lines alone are read
        _names_read(report, text, None)
        report.findings, report.defaults = _line_findings(code, None)
    report.spawns = any(_SPAWNS.search(line) for line in code)
    report.inits = bool(_INIT.search(text))
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
    report = read_source(source, str(path))
    _read_helpers(report, source, file.parent)
    return report


def _imported_files(source: str, folder: Path) -> List[Tuple[Tuple[int, int], Path]]:
    """The modules of the script's own folder that it imports (``import helper``, ``from helper import rank``,
    ``from . import helper``), each with where it is imported: what they read, the script reads there."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level <= 1:
            base = [node.module] if node.module else []
            modules = base + [f"{node.module}.{a.name}" if node.module else a.name for a in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            for file in (folder.joinpath(*parts).with_suffix(".py"), folder.joinpath(*parts, "__init__.py")):
                if file.is_file():
                    found.append(((node.lineno, node.col_offset), file))
    return found


def _read_helpers(report: ScriptReport, source: str, folder: Path, limit: int = 20) -> None:
    """Add the launcher names read in the script's own helper modules (and theirs, up to ``limit`` files),
    as if read where the script imports them: a rank from ``helper.rank()`` that reads SLURM_PROCID is
    SLURM's convention, not torchrun's ``env://``."""
    tree = Tree.of(source)
    if tree is None:
        return
    reads: Dict[str, tuple] = dict(tree.reads())
    seen: Set[Path] = set()
    todo = _imported_files(source, folder)
    while todo and len(seen) < limit:
        where, file = todo.pop(0)
        if file.resolve() in seen:
            continue
        seen.add(file.resolve())
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        helper = Tree.of(text)
        if helper is None:
            continue
        for name, at in _helper_reads(helper).items():
            reads[name] = min(reads.get(name, where + at), where + at)
        todo += [(where, inner) for _, inner in _imported_files(text, file.parent)]
    if not seen:
        return
    report.torchrun_names = [n for n in _TORCHRUN if n in reads]
    report.slurm_names = [n for n in _SLURM if n in reads]
    report.slurm_first = _slurm_first(reads)


def _helper_reads(helper: Tree) -> Dict[str, Tuple[int, int]]:
    """What a helper module reads: as a script reads, and also a value it keeps for its importers
    (``RANK = int(os.environ["SLURM_PROCID"])``, used nowhere in the helper itself)."""
    found = dict(helper.reads())
    for node in helper.strings:
        above = helper.parents.get(node)
        written = isinstance(above, ast.Subscript) and not isinstance(above.ctx, ast.Load)
        if node.value in _TORCHRUN.keys() | _SLURM.keys() and not written and node.value not in found:
            statement = next((a for a in _statement_of(node, helper.parents)), None)
            if isinstance(statement, ast.Assign) and statement in helper.module:
                found[node.value] = (node.lineno, node.col_offset)
    return found


def _statement_of(node: ast.AST, parents: Dict[ast.AST, ast.AST]):
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.stmt):
            yield node
            return


def template_problem(report: ScriptReport, template: str, processes_per_node: int) -> Optional[str]:
    """The message (in the user's language) that refuses ``template`` for this script, or None when it fits."""
    convention = report.convention
    if convention == "slurm" and template == "torchrun":
        return t("script.slurm_under_torchrun", path=report.path,
                 names=", ".join(n for n in report.slurm_names))
    if convention == "either" and report.slurm_first and template == "torchrun":
        return t("script.slurm_first_under_torchrun", path=report.path,
                 slurm=", ".join(report.slurm_names), torchrun=", ".join(report.torchrun_names))
    if convention == "per-node" and (template == "torchrun" or processes_per_node != 1):
        return t("script.per_node_needs_one_task", path=report.path, template=template,
                 nproc=processes_per_node)
    return None


def reads_gpus_on_node(report: ScriptReport) -> bool:
    """Does the script read ``SLURM_GPUS_ON_NODE`` with ``[]`` (set by SLURM only with GPUs: a KeyError on a CPU;
    0 would divide by zero in ``rank % gpus_per_node``)? The CPU forms then set it to the processes per node,
    the value of the same layout on GPU nodes, and say so (``script.gpus_on_node_ipp``/``_job``)."""
    return any(f.kind == "gpu_variable" and "SLURM_GPUS_ON_NODE" in f.code for f in report.findings)


#: What one SLURM task alone on one machine would see: the values a per-node parent needs to run there.
ONE_TASK = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NPROCS": "1", "SLURM_NTASKS": "1",
            "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_GPUS_ON_NODE": "1",
            "SLURM_CPUS_PER_TASK": "1"}
_SLURM_READ = re.compile(r"""["'](SLURM_[A-Z_]+)["']""")


def one_machine_command(path) -> str:
    """The command that runs the script at ``path`` on this machine as one SLURM task would run it:
    ``SLURM_NPROCS=1 SLURM_PROCID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python PATH`` — each SLURM name
    its source quotes, with one task's value, and the rendezvous address its process group reads."""
    source = Path(path).read_text(encoding="utf-8", errors="replace")
    read = dict.fromkeys(name for name in _SLURM_READ.findall(source) if name in ONE_TASK)
    pairs = [f"{name}={ONE_TASK[name]}" for name in read] + ["MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"]
    return " ".join([*pairs, "python", shlex.quote(str(path))])


def template_warning(report: ScriptReport) -> Optional[str]:
    """A warning for a script that reads no launcher variable at all (it may not be a DDP script)."""
    if report.convention == "unknown":
        return t("script.reads_nothing", path=report.path)
    return None


def _lines(report: ScriptReport, key: str, findings: List[Finding], lang: Optional[str]) -> List[str]:
    out = [t(key, lang, n=len(findings))]
    for finding in findings:
        out.append(f"  {report.path}:{finding.line}: {finding.code}")
        out.append(f"      → {finding.describe(lang)}")
    return out


def _verdict(report: ScriptReport, lang: Optional[str]) -> List[str]:
    """What was shown about a CPU: "ready" only after a start here that ended with exit code 0."""
    trial = report.trial
    if trial is None:
        return [] if report.findings else [t("script.not_run", lang, path=report.path, seconds=RUN_SECONDS)]
    if trial.outcome == "ended":
        return [t("script.run_ended" if report.findings else "script.ready", lang, seconds=trial.seconds)]
    if trial.outcome == "failed":
        return [t("script.run_failed", lang, seconds=trial.seconds, code=trial.code,
                  error=trial.error or t("script.run_no_error_line", lang))]
    if trial.outcome == "limit":
        return [t("script.run_limit", lang, seconds=trial.seconds)]
    return [t("script.run_cannot", lang, why=trial.error)]


def describe(report: ScriptReport, lang: Optional[str] = None) -> str:
    """``ddp-tutorial check-script``'s text: the convention, the launch that fits, each line to change, the
    defaults to give on a CPU, and what was shown about a CPU (never "ready" without a start that showed it)."""
    out = [t("script.header", lang, path=report.path),
           t(_CONVENTION_KEYS["either-slurm-first" if report.convention == "either" and report.slurm_first
                              else report.convention], lang,
             names=", ".join(report.torchrun_names + report.slurm_names) or "-"),
           t("script.fits", lang, launch=report.fitting())]
    if report.findings:
        out += _lines(report, "script.to_change", report.findings, lang)
    if report.defaults:
        out += _lines(report, "script.defaults", report.defaults, lang)
    out += _verdict(report, lang)
    out.append(t("script.see_page", lang))
    return "\n".join(out)


def exit_code(report: ScriptReport) -> int:
    """check-script's exit code: 1 when lines are to change or the start here failed, else 0 (2, a wrong
    argument or a file that cannot be read, comes from the error raised before)."""
    return 1 if report.findings or report.trial is not None and report.trial.outcome == "failed" else 0
