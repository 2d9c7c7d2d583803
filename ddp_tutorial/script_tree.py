"""What a DDP script's syntax tree tells beyond its single lines (for :mod:`ddp_tutorial.script_check`): where
each launcher name is first read as a rank source, which values hold a GPU's number and where one is used as
a device, where ``torch.cuda.device_count()`` is used as a count, and which ``"nccl"``/``"cuda"`` are only
defaults that the command line overrides. Read from the source, never run.

A GPU's number is a plain ``int`` that torch takes as ``cuda:n``: ``.to(n)``, ``.cuda(n)``, ``torch.device(n)``,
``device=n``, ``device_ids=[n]``. It is followed from where it is born (an ``int(…)``, a literal, the index
``mp.spawn`` gives its function's first parameter, a name given to ``set_device``/``device_ids``) through
assignments and into the functions and classes it is passed to, whatever its name.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple

from . import launch_env as names

# What a script reads tells its convention (script_check): the launcher variables of launch_env (the one list).
TORCHRUN_NAMES = (names.RANK, names.LOCAL_RANK, names.WORLD_SIZE, names.LOCAL_WORLD_SIZE)
SLURM_NAMES = (names.SLURM_PROCID, names.SLURM_LOCALID, names.SLURM_NTASKS, names.SLURM_NPROCS, names.SLURM_NODEID,
               names.SLURM_NTASKS_PER_NODE, names.SLURM_NNODES)
LAUNCHER_NAMES = frozenset(TORCHRUN_NAMES + SLURM_NAMES)
# Calls whose arguments are only shown: a launcher name read inside one is not a rank source.
_SHOWS = frozenset("print pprint debug info warning warn error critical exception log write".split())
# The names a GPU's number goes by in most scripts (local_rank, gpu_id, the seed's gpu_id_in_node …); the
# to_cuda pattern of script_check knows them too.
NUMBER = (r"(?:local_rank|gpu_id|gpu|rank|device_id|local_gpu|gpu_index|gpu_idx|device_index)"
          r"(?:_in_node|_on_node|_id)?")
NUMBER_NAMES = re.compile(r"^(?:\w+\.)*" + NUMBER + "$")
_SPAWNS = frozenset(("spawn", "start_processes"))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def called(call: ast.Call) -> str:
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
    """The nodes above ``node`` up to its statement (the statement included)."""
    while node in parents:
        node = parents[node]
        yield node
        if isinstance(node, ast.stmt):
            return


def _shown(node: ast.AST, parents) -> bool:
    return any(isinstance(a, ast.Call) and called(a) in _SHOWS for a in _ancestors(node, parents))


def _shown_only(node: ast.AST, parents, loads: Dict[str, List[ast.Name]]) -> bool:
    """Is this read only printed or logged: inside a print/log call, or kept in a variable whose every use
    is inside one?"""
    statement = None
    for above in _ancestors(node, parents):
        if isinstance(above, ast.Call) and called(above) in _SHOWS:
            return True
        statement = above
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return all(_shown(use, parents) for use in loads.get(targets[0].id, []))
    return False


def _tested(node: ast.AST, parents) -> bool:
    """Is this value only asked about: compared, in a condition (if, while, assert, ``x if c else y``), a
    fallback (``n or 1``, ``max(1, n)``) or shown?"""
    below = node
    for above in _ancestors(node, parents):
        if isinstance(above, (ast.Compare, ast.BoolOp)) or isinstance(above, ast.Call) and \
                called(above) in _SHOWS | {"max"}:
            return True
        if isinstance(above, (ast.If, ast.While, ast.IfExp, ast.Assert)) and below is above.test:
            return True
        below = above
    return False


def _is_device(value: ast.AST) -> bool:
    """Is this value a device rather than a GPU's number: ``torch.device(…)``, ``"cuda:0"``, ``f"cuda:{n}"``,
    or a choice between such?"""
    if isinstance(value, ast.IfExp):
        return _is_device(value.body) or _is_device(value.orelse)
    return isinstance(value, ast.JoinedStr) or isinstance(value, ast.Constant) and isinstance(value.value, str) or \
        isinstance(value, ast.Call) and called(value) == "device"


def _is_text(value: ast.AST) -> bool:
    return isinstance(value, ast.JoinedStr) or isinstance(value, ast.Constant) and isinstance(value.value, str)


def _device_values(call: ast.Call, all_kinds: bool = True) -> List[ast.AST]:
    """The values this call uses as a device: ``.to(x)``, ``.cuda(x)``, ``torch.device(x)``, ``device=x``, and
    (``all_kinds``) ``set_device(x)``, ``device_ids=[x]``, ``output_device=x``."""
    name, values = called(call), []
    takes = ("device", "set_device") if all_kinds else ("device",)
    if call.args and (name in ("to", "cuda") and isinstance(call.func, ast.Attribute) or
                      name in takes and len(call.args) == 1):
        values.append(call.args[0])
    for keyword in call.keywords:
        if keyword.arg == "device" or all_kinds and keyword.arg == "output_device":
            values.append(keyword.value)
        elif all_kinds and keyword.arg == "device_ids" and isinstance(keyword.value, (ast.List, ast.Tuple)):
            values += keyword.value.elts
    return values


def _init_of(scope: ast.AST) -> Optional[ast.AST]:
    """A function itself, or a class's ``__init__``."""
    if isinstance(scope, ast.ClassDef):
        return next((n for n in scope.body if isinstance(n, _FUNCTIONS) and n.name == "__init__"), None)
    return scope


def _device_parameters(scope: ast.AST) -> Set[str]:
    """The parameters a function (or a class's ``__init__``) uses as a device, there or, for a class, kept as
    ``self.x = p`` and used as a device in any of its methods."""
    function = _init_of(scope)
    if function is None:
        return set()
    used = {ast.unparse(value) for node in ast.walk(scope) if isinstance(node, ast.Call)
            for value in _device_values(node)}
    if scope is not function:  # a class: self.gpu_id = gpu_id, then .to(self.gpu_id) in a method
        used |= {node.value.id for node in ast.walk(function)
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                 and any(ast.unparse(target) in used for target in node.targets)}
    return used & {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}


def _arguments(call: ast.Call, scope: ast.AST) -> List[Tuple[str, ast.AST]]:
    """(parameter, value) for each argument of ``call`` to a function or class (``self`` skipped)."""
    function = _init_of(scope)
    if function is None:
        return []
    parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
    if (isinstance(call.func, ast.Attribute) or scope is not function) and parameters[:1] == ["self"]:
        parameters = parameters[1:]
    return list(zip(parameters, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg]


@dataclass
class Tree:
    """A script's syntax tree, read once."""
    parents: Dict[ast.AST, ast.AST]
    loads: Dict[str, List[ast.Name]] = field(default_factory=dict)
    devices: Set[str] = field(default_factory=set)  # names and attributes that hold a device (torch.device, "cuda")
    functions: Dict[str, ast.AST] = field(default_factory=dict)  # functions and classes by name
    calls: List[ast.Call] = field(default_factory=list)
    assigns: List[ast.Assign] = field(default_factory=list)
    strings: List[ast.Constant] = field(default_factory=list)
    module: List[ast.stmt] = field(default_factory=list)

    @classmethod
    def of(cls, source: str) -> Optional["Tree"]:
        """The tree of ``source``, or None when it does not parse (then the lines alone are read)."""
        try:
            root = ast.parse(source)
            nodes, parents = _nodes(root)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
        tree = cls(parents, module=root.body)
        for node in nodes:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                tree.strings.append(node)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                tree.loads.setdefault(node.id, []).append(node)
            elif isinstance(node, _FUNCTIONS + (ast.ClassDef,)):
                tree.functions.setdefault(node.name, node)
            elif isinstance(node, ast.Assign):
                tree.assigns.append(node)
                if _is_device(node.value):
                    tree.devices.update(ast.unparse(target) for target in node.targets)
            elif isinstance(node, ast.Call):
                tree.calls.append(node)
        return tree

    def reads(self, wanted: Optional[Set[str]] = None) -> Dict[str, Tuple[int, int]]:
        """Launcher name (of ``wanted``, by default launch_env's) → (line, column) where it is first read;
        written (``os.environ["RANK"] = …``) or only shown (printed, logged) is not read."""
        wanted = LAUNCHER_NAMES if wanted is None else wanted
        found: Dict[str, Tuple[int, int]] = {}
        for node in self.strings:
            if node.value not in wanted:
                continue
            above = self.parents.get(node)
            if isinstance(above, ast.Subscript) and not isinstance(above.ctx, ast.Load):
                continue
            if not _shown_only(node, self.parents, self.loads):
                found[node.value] = min(found.get(node.value, (node.lineno, node.col_offset)),
                                        (node.lineno, node.col_offset))
        return found

    # -- a GPU's number --------------------------------------------------------------------------------

    def is_number(self, value: ast.AST, numbers: Set[str]) -> bool:
        """Does this expression hold a GPU's number: an int literal, ``int(…)``, a name known to hold one,
        or arithmetic on one?"""
        if isinstance(value, ast.Constant):
            return type(value.value) is int
        if isinstance(value, ast.Call):
            return called(value) == "int" and isinstance(value.func, ast.Name)
        if isinstance(value, (ast.Name, ast.Attribute)):
            text = ast.unparse(value)
            return text not in self.devices and (text in numbers or bool(NUMBER_NAMES.match(text)))
        if isinstance(value, ast.BinOp):
            sides = (value.left, value.right)
            return not any(map(_is_text, sides)) and any(self.is_number(side, numbers) for side in sides)
        if isinstance(value, ast.UnaryOp):
            return self.is_number(value.operand, numbers)
        return False

    def numbers(self) -> Set[str]:
        """The names and attributes that hold a GPU's number: given to ``set_device(n)`` or ``device_ids=[n]``,
        the first parameter of a function that ``mp.spawn`` starts (its process index), and what is
        assigned from an int (``gpu = int(os.environ["LOCAL_RANK"])``, ``g = gpu % 4``)."""
        held: Set[str] = set()
        for call in self.calls:
            if called(call) == "set_device" or any(k.arg in ("device_ids", "output_device") for k in call.keywords):
                held |= {ast.unparse(v) for v in _device_values(call) if isinstance(v, (ast.Name, ast.Attribute))}
            if called(call) in _SPAWNS:
                target = (call.args[:1] or [k.value for k in call.keywords if k.arg == "fn"] or [None])[0]
                function = self.functions.get(target.id) if isinstance(target, ast.Name) else None
                if isinstance(function, _FUNCTIONS) and function.args.args:
                    held.add(function.args.args[0].arg)
        held -= self.devices
        for _ in range(4):  # a chain of a few assignments: gpu = int(…); g = gpu; model.to(g)
            more = {ast.unparse(target) for node in self.assigns for target in node.targets
                    if isinstance(target, (ast.Name, ast.Attribute)) and self.is_number(node.value, held)}
            more -= self.devices
            if more <= held:
                break
            held |= more
        return held

    def number_devices(self, numbers: Set[str]) -> Set[int]:
        """The lines that use a GPU's number as a device: ``.to(n)``, ``.cuda(n)``, ``torch.device(n)``,
        ``device=n`` (``device_ids=[n]`` and ``set_device(n)`` have findings of their own)."""
        return {call.lineno for call in self.calls
                if any(self.is_number(value, numbers) for value in _device_values(call, all_kinds=False))}

    def number_arguments(self, numbers: Set[str]) -> Set[int]:
        """The lines of calls ``f(…, n, …)`` (or ``Class(…, n, …)``) that pass a GPU's number ``n`` to a
        parameter that ``f`` (or the class) uses as a device."""
        as_device: Dict[ast.AST, Set[str]] = {}
        lines = set()
        for call in self.calls:
            scope = self.functions.get(called(call))
            if scope is None:
                continue
            if scope not in as_device:
                as_device[scope] = _device_parameters(scope)
            if any(parameter in as_device[scope] and self.is_number(value, numbers)
                   for parameter, value in _arguments(call, scope)):
                lines.add(call.lineno)
        return lines

    # -- device_count() as a count ---------------------------------------------------------------------

    def device_counts(self) -> Set[int]:
        """The lines that use ``torch.cuda.device_count()`` as a count (``nprocs=``, ``world_size =``,
        ``range(…)``, arithmetic): 0 on a CPU, so nothing runs. Compared, in a condition or a fallback it
        is a question, not a count; a name that holds it counts unless the script compares it somewhere."""
        lines = set()
        for call in self.calls:
            if called(call) != "device_count" or _tested(call, self.parents):
                continue
            statement = self.parents.get(call)
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                    isinstance(statement.targets[0], ast.Name):
                uses = self.loads.get(statement.targets[0].id, [])
                if not uses or any(_tested(use, self.parents) for use in uses):
                    continue
            lines.add(call.lineno)
        return lines

    # -- defaults the command line overrides ----------------------------------------------------------

    def defaults(self) -> Dict[int, str]:
        """Line → ``"nccl"`` or ``"cuda"`` for the defaults a user overrides at launch: an option's
        ``default=`` (``add_argument("--backend", default="nccl")``), and a module-level ``backend = "nccl"``
        above an ``exec(…)`` of a config file (nanoGPT's configurator: ``--backend=gloo --device=cpu``)."""
        found: Dict[int, str] = {}
        for call in self.calls:
            if called(call) == "add_argument":
                for keyword in call.keywords:
                    if keyword.arg == "default" and _gpu_text(keyword.value):
                        found[keyword.value.lineno] = _gpu_text(keyword.value)
        execs = [s.lineno for s in self.module if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                 and called(s.value) == "exec"]
        for statement in self.module:
            if isinstance(statement, ast.Assign) and execs and statement.lineno < max(execs) and \
                    all(isinstance(t, ast.Name) for t in statement.targets) and _gpu_text(statement.value):
                found[statement.lineno] = _gpu_text(statement.value)
        return found


def _gpu_text(value: ast.AST) -> str:
    """``"nccl"`` or ``"cuda"`` when the value is that text (``"cuda:0"`` too), else ``""``."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        if value.value == "nccl":
            return "nccl"
        if value.value == "cuda" or value.value.startswith("cuda:"):
            return "cuda"
    return ""
