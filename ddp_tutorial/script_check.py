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
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

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
    ("to_cuda", re.compile(r"""\.cuda\s*\(|\.to\s*\(\s*(?:f?["']cuda|(?:\w+\.)*(?:local_rank|gpu_id|gpu|rank|"""
                           r"""device_id|local_gpu)\s*[,)])|\bdevice\s*=(?!=)\s*(?:\w+\.)*(?:local_rank|gpu_id|gpu|rank|"""
                           r"""device_id|local_gpu)\s*[,)]|\btorch\.device\s*\(\s*f?["']cuda|"""
                           r"""(?<![=!<>])=\s*f?["']cuda(?::[^"']*)?["']""")),
    ("local_rank_arg", re.compile(r"""add_argument\s*\(\s*["']--local[_-]rank""")),
)


#: The message of each finding and each convention (literal keys: grep finds every use).
_FINDING_KEYS = {
    "set_device": "script.finding_set_device", "device_ids": "script.finding_device_ids",
    "nccl": "script.finding_nccl", "device_count_assert": "script.finding_device_count_assert",
    "to_cuda": "script.finding_to_cuda", "local_rank_arg": "script.finding_local_rank_arg",
    "no_destroy": "script.finding_no_destroy", "cuda_call": "script.finding_cuda_call",
    "device_number_arg": "script.finding_device_number_arg",
}
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


# Calls whose arguments are only shown: a launcher name read inside one is not a rank source.
_SHOWS = frozenset("print pprint debug info warning warn error critical exception log write".split())
# The GPU numbers every script calls so (the to_cuda pattern knows them).
_NUMBER_NAMES = re.compile(r"^(?:\w+\.)*(?:local_rank|gpu_id|gpu|rank|device_id|local_gpu)$")


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _nodes(tree: ast.AST) -> Tuple[List[ast.AST], Dict[ast.AST, ast.AST]]:
    """Every node of the tree and each one's parent, in one walk."""
    nodes, parents, todo = [], {}, [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            parents[child] = node
            todo.append(child)
    return nodes, parents


def _ancestors(node: ast.AST, parents: Dict[ast.AST, ast.AST]) -> Iterator[ast.AST]:
    while node in parents:
        node = parents[node]
        yield node
        if isinstance(node, ast.stmt):
            return


def _shown_only(node: ast.AST, parents, loads: Dict[str, List[ast.Name]]) -> bool:
    """Is this read only printed or logged: inside a print/log call, or kept in a variable whose every use
    is inside one?"""
    statement = None
    for above in _ancestors(node, parents):
        if isinstance(above, ast.Call) and _called(above) in _SHOWS:
            return True
        statement = above
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return all(any(isinstance(a, ast.Call) and _called(a) in _SHOWS for a in _ancestors(use, parents))
                       for use in loads.get(targets[0].id, []))
    return False


def _is_device(value: ast.AST) -> bool:
    """Is this value a device rather than a GPU's number: ``torch.device(…)``, ``"cuda:0"``, ``f"cuda:{n}"``,
    or a choice between such?"""
    if isinstance(value, ast.IfExp):
        return _is_device(value.body) or _is_device(value.orelse)
    return isinstance(value, ast.JoinedStr) or isinstance(value, ast.Constant) and isinstance(value.value, str) or \
        isinstance(value, ast.Call) and _called(value) == "device"


def _device_parameters(function: ast.AST) -> Set[str]:
    """The parameters a function uses as a device: ``.to(p)``, ``.cuda(p)``, ``device=p``."""
    used = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            if _called(node) in ("to", "cuda") and isinstance(node.func, ast.Attribute) and node.args and \
                    isinstance(node.args[0], ast.Name):
                used.add(node.args[0].id)
            used.update(k.value.id for k in node.keywords if k.arg == "device" and isinstance(k.value, ast.Name))
    return used


@dataclass
class _Tree:
    """A script's syntax tree, read once: what it tells beyond single lines is where each launcher name is
    first read as a rank source (:meth:`reads`), the expressions that hold a GPU's number (:meth:`numbers`),
    and the calls that pass one on to a function that uses it as a device (:meth:`number_arguments`)."""
    parents: Dict[ast.AST, ast.AST]
    loads: Dict[str, List[ast.Name]] = field(default_factory=dict)
    devices: Set[str] = field(default_factory=set)  # names and attributes that hold a device (torch.device, "cuda")
    functions: Dict[str, ast.AST] = field(default_factory=dict)
    calls: List[ast.Call] = field(default_factory=list)
    launcher_names: List[ast.Constant] = field(default_factory=list)

    @classmethod
    def of(cls, source: str) -> Optional["_Tree"]:
        """The tree of ``source``, or None when it does not parse (then the lines alone are read)."""
        try:
            nodes, parents = _nodes(ast.parse(source))
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
        tree, wanted = cls(parents), _TORCHRUN.keys() | _SLURM.keys()
        for node in nodes:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted:
                tree.launcher_names.append(node)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                tree.loads.setdefault(node.id, []).append(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                tree.functions.setdefault(node.name, node)
            elif isinstance(node, ast.Assign) and _is_device(node.value):
                tree.devices.update(ast.unparse(target) for target in node.targets)
            elif isinstance(node, ast.Call):
                tree.calls.append(node)
        return tree

    def reads(self) -> Dict[str, Tuple[int, int]]:
        """Launcher name → (line, column) where it is first read; written (``os.environ["RANK"] = …``) or
        only shown (printed, logged) is not read."""
        found: Dict[str, Tuple[int, int]] = {}
        for node in self.launcher_names:
            above = self.parents.get(node)
            if isinstance(above, ast.Subscript) and not isinstance(above.ctx, ast.Load):
                continue
            if not _shown_only(node, self.parents, self.loads):
                found[node.value] = min(found.get(node.value, (node.lineno, node.col_offset)),
                                        (node.lineno, node.col_offset))
        return found

    def numbers(self) -> Set[str]:
        """The expressions given to ``set_device(n)`` or ``device_ids=[n]`` that are not devices: GPU numbers."""
        held: List[ast.AST] = []
        for call in self.calls:
            held += call.args[:1] if _called(call) == "set_device" else []
            for keyword in call.keywords:
                if keyword.arg in ("device_ids", "output_device"):
                    value = keyword.value
                    held += value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
        return {ast.unparse(n) for n in held if isinstance(n, (ast.Name, ast.Attribute))} - self.devices

    def number_arguments(self, numbers: Set[str]) -> Set[int]:
        """The lines of calls ``f(…, n, …)`` that pass a GPU number ``n`` to a parameter ``f`` uses as a device."""
        as_device: Dict[ast.AST, Set[str]] = {}
        lines = set()
        for call in self.calls:
            function = self.functions.get(_called(call))
            if function is None:
                continue
            if function not in as_device:
                as_device[function] = _device_parameters(function)
            if any(parameter in as_device[function] and _is_number(value, numbers)
                   for parameter, value in _arguments(call, function)):
                lines.add(call.lineno)
        return lines


def _arguments(call: ast.Call, function: ast.AST) -> List[Tuple[str, ast.AST]]:
    """(parameter, value) for each argument of ``call`` to ``function`` (``self`` skipped for a method)."""
    parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
    if isinstance(call.func, ast.Attribute) and parameters[:1] == ["self"]:
        parameters = parameters[1:]
    return list(zip(parameters, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg]


def _is_number(value: ast.AST, numbers: Set[str]) -> bool:
    if not isinstance(value, (ast.Name, ast.Attribute)):
        return False
    text = ast.unparse(value)
    return text in numbers or bool(_NUMBER_NAMES.match(text))


def _number_uses(numbers: Set[str]) -> Optional[re.Pattern]:
    """``.to(n)``, ``.cuda(n)``, ``device=n`` for the GPU numbers of this script (beyond the usual names)."""
    names = sorted(n for n in numbers if not _NUMBER_NAMES.match(n))
    if not names:
        return None
    either = "|".join(re.escape(n) for n in names)
    return re.compile(rf"\.(?:to|cuda)\s*\(\s*(?:{either})\s*[,)]|\bdevice\s*=(?!=)\s*(?:{either})\s*[,)]")


def _slurm_first(reads: Dict[str, Tuple[int, int]]) -> bool:
    """Both sets read: is srun's rank (or local rank) read before torchrun's — the one that wins?"""
    pairs = [(names.SLURM_PROCID, names.RANK), (names.SLURM_LOCALID, names.LOCAL_RANK),
             (names.SLURM_PROCID, names.LOCAL_RANK), (names.SLURM_LOCALID, names.RANK)]
    both = [(slurm, torchrun) for slurm, torchrun in pairs if slurm in reads and torchrun in reads]
    return bool(both) and reads[both[0][0]] < reads[both[0][1]]


def _names_read(report: ScriptReport, text: str, tree: Optional[_Tree]) -> None:
    """The launcher names the script reads, and whether srun's rank is read before torchrun's."""
    if tree is not None:
        reads = tree.reads()
    else:  # not Python we can parse: any quoted name counts, in the order of the text
        reads = {n: (m.start(), 0) for n, p in {**_TORCHRUN, **_SLURM}.items() for m in [p.search(text)] if m}
    report.torchrun_names = [n for n in _TORCHRUN if n in reads]
    report.slurm_names = [n for n in _SLURM if n in reads]
    report.slurm_first = _slurm_first(reads)


def _line_findings(code: List[str], tree: Optional[_Tree]) -> List[Finding]:
    """The lines a CUDA-only script changes, each with its first kind that is not already guarded."""
    numbers = tree.numbers() if tree is not None else set()
    uses = _number_uses(numbers)
    number_args = tree.number_arguments(numbers) if tree is not None else set()
    guarded = _guarded_lines(code)
    findings = []
    for index, line in enumerate(code):
        kinds = [kind for kind, pattern in _CUDA_LINES if pattern.search(line)] if line.strip() else []
        kinds += ["to_cuda"] if uses is not None and uses.search(line) else []
        kinds += ["device_number_arg"] if index + 1 in number_args else []
        for kind in kinds:
            if kind == "nccl" and "gloo" in line:  # "nccl" if … else "gloo": already chosen with the device
                break
            if kind in ("local_rank_arg", "device_count_assert") or not guarded[index]:
                findings.append(Finding(index + 1, kind, line.strip()))
                break
    return findings


def read_source(source: str, path: str = "<script>") -> ScriptReport:
    """The report for a script's text."""
    report = ScriptReport(path=path)
    code = _without_comments(source)
    text = "\n".join(code)
    try:
        tree = _Tree.of(source)
        _names_read(report, text, tree)
        report.findings = _line_findings(code, tree)
    except RecursionError:  # a tree nested too deeply to walk: the lines alone are read
        _names_read(report, text, None)
        report.findings = _line_findings(code, None)
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
    return read_source(source, str(path))


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


def template_warning(report: ScriptReport) -> Optional[str]:
    """A warning for a script that reads no launcher variable at all (it may not be a DDP script)."""
    if report.convention == "unknown":
        return t("script.reads_nothing", path=report.path)
    return None


def describe(report: ScriptReport, lang: Optional[str] = None) -> str:
    """``ddp-tutorial check-script``'s text: the convention, the launch that fits, each line to change."""
    out = [t("script.header", lang, path=report.path),
           t(_CONVENTION_KEYS["either-slurm-first" if report.convention == "either" and report.slurm_first
                              else report.convention], lang,
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
