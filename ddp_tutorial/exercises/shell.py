"""Reading a job script as bash runs it, for the checks of notebook 05: comments and continuation lines,
its simple commands with the blocks around them, and the port a ``MASTER_PORT=…`` value gives for a job id
(integers, ``$((…))`` arithmetic, ``$SLURM_JOB_ID`` and its substrings; nothing is run)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

_KEYWORDS = {"if", "then", "do", "else", "elif", "while", "until", "!", "{", "(", "time"}
JOB_ID_NAMES = ("SLURM_JOB_ID", "SLURM_JOBID")


def _unquoted(text):
    """The indices of ``text``'s characters that stand outside quotes, not escaped by a backslash (the quotes
    themselves left out)."""
    quote, index = None, 0
    while index < len(text):
        char = text[index]
        if char == "\\" and quote != "'":
            index += 2
            continue
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        else:
            yield index
        index += 1


def _without_comment(line):
    """``line`` as bash runs it: an unquoted ``#`` at the start of a word begins a comment."""
    for index in _unquoted(line):
        if line[index] == "#" and (index == 0 or line[index - 1].isspace() or line[index - 1] in ";&|("):
            return line[:index].rstrip()
    return line


def code_lines(text):
    """(first line number, line) of every command line bash runs: continuations (``\\`` + newline) joined,
    comments, blank and #SBATCH lines left out."""
    lines, pending, start = [], "", None
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending and (not line.strip() or line.strip().startswith("#")):
            continue
        start = number if start is None else start
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        code = _without_comment(pending + line)
        if code.strip():
            lines.append((start, code))
        pending, start = "", None
    if pending.strip():
        lines.append((start, _without_comment(pending)))
    return lines


def _commands(code):
    """The simple commands of a code line, each as (the operator before it, its words): split at unquoted ``;``,
    ``&``, ``&&``, ``||`` and ``|`` (not ``2>&1``), the keywords that lead into a command (if, then, do, …) each
    on its own (with no operator before the command they lead into)."""
    pieces, start, operator = [], 0, ""
    for index in _unquoted(code):
        char = code[index]
        if index < start:   # the second character of && or ||
            continue
        if char in ";&|" and not (char == "&" and (index > 0 and code[index - 1] in "<>"
                                                   or code[index + 1:index + 2] == ">")):
            pieces.append((operator, code[start:index]))
            end = index
            while code[end + 1:end + 2] in ("&", "|") and code[end + 1:end + 2] != "":
                end += 1
            operator, start = code[index:end + 1], end + 1
    pieces.append((operator, code[start:]))
    commands = []
    for operator, piece in pieces:
        words = piece.split()
        while words and words[0] in _KEYWORDS:
            commands.append((operator, [words.pop(0)]))
            operator = ""
        if words:
            commands.append((operator, words))
    return commands


class Command(NamedTuple):
    line: int          # where its code line starts
    code: str          # that code line
    words: list        # the command's words
    depth: int         # how many blocks (if, loop, case, { … }) it is in
    loops: int         # how many of them are while/until/for loops
    guards: tuple      # the conditions of the ifs and case branches it is in (not those of an else)


_CASE_PATTERN = re.compile(r"^\(?([^()]*)\)$")  # a case branch's pattern: 75) or (75)
_OPENERS = ("if", "while", "until", "for", "case")
_CLOSERS = ("fi", "done", "esac", "}")
_LOOPS = ("while", "until", "for")


@dataclass
class _Block:
    """A block the walk is in: an if, a loop, a case or ``{ … }``."""
    kind: str                # if, while, until, for, case or {
    condition: str | None    # an if's condition (growing until its then), a case branch's SUBJECT == PATTERN
    complete: bool           # whether the condition is read in full (an if's ``then`` reached)
    subject: str = ""        # a case's subject, kept for every branch

    def guard(self):
        """The condition the commands inside stand under; ``None`` where there is none (a loop, an else)."""
        return self.condition if self.kind in ("if", "case") and self.condition and self.complete else None


# Each step reads one shell construct at the head of a simple command's words: it updates the blocks and
# gives back the words still to read (the same list where the construct is not there, [] when none are left).

def _open_block(blocks, operator, words):
    """``if``, a loop, ``{`` (or a line ending in one: ``name() {``) and ``case SUBJECT in`` open a block;
    a case's first branch may follow on the same command."""
    first = words[0]
    if first not in _OPENERS and first != "{" and words[-1] != "{":
        return words
    kind = first if first in _OPENERS else "{"
    blocks.append(_Block(kind, None, complete=kind != "if"))
    if kind != "case":
        return []
    blocks[-1].subject = words[1] if len(words) > 1 else ""
    return words[3:] if len(words) > 2 and words[2] == "in" else []


def _close_block(blocks, operator, words):
    """``fi``, ``done``, ``esac`` and ``}`` close the innermost block."""
    if words[0] not in _CLOSERS:
        return words
    if blocks:
        blocks.pop()
    return []


def _else_branch(blocks, operator, words):
    """``elif`` starts a new condition; ``else`` runs under none."""
    if words[0] not in ("elif", "else") or not blocks:
        return words
    blocks[-1].condition, blocks[-1].complete = (None, False) if words[0] == "elif" else ("", True)
    return []


def _then(blocks, operator, words):
    """``then`` ends an if's condition."""
    if words[0] != "then" or not blocks or blocks[-1].kind != "if":
        return words
    blocks[-1].complete = True
    return []


def _if_condition(blocks, operator, words):
    """A command before an if's ``then`` is part of its condition, joined with the operator before it."""
    if not blocks or blocks[-1].kind != "if" or blocks[-1].complete or words[0] in _KEYWORDS - {"!"}:
        return words
    blocks[-1].condition = " ".join(filter(None, (blocks[-1].condition, operator, *words)))
    return []


def _case_branch(blocks, operator, words):
    """``PATTERN)`` in a case starts a branch: ``SUBJECT == PATTERN``; its command may follow."""
    pattern = _CASE_PATTERN.match(words[0]) if blocks and blocks[-1].kind == "case" else None
    if not pattern:
        return words
    blocks[-1].condition = f"{blocks[-1].subject} == {pattern.group(1)}"
    return words[1:]


def _keyword(blocks, operator, words):
    """Any other keyword (``do``, ``time``, ``(``, a stray ``for`` …) is no command of its own."""
    return [] if words[0] in _KEYWORDS or words[0] in ("for", "case") else words


_STEPS = (_open_block, _close_block, _else_branch, _then, _if_condition, _case_branch, _keyword)


def walk(text):
    """Every simple command of the script, in order, with the loops, ifs and case branches around it. An if's
    condition is its commands up to ``then``, joined with their operators (``[ … ] || [ … ]``); a case branch's
    is ``SUBJECT == PATTERN``."""
    blocks, walked = [], []
    for number, code in code_lines(text):
        for operator, words in _commands(code):
            for step in _STEPS:
                words = step(blocks, operator, words)
                if not words:
                    break
            else:
                walked.append(Command(number, code, words, depth=len(blocks),
                                      loops=sum(block.kind in _LOOPS for block in blocks),
                                      guards=tuple(filter(None, (block.guard() for block in blocks)))))
    return walked


_ARITHMETIC = re.compile(r"\s*(?:(\d+)|\$?\{?([A-Za-z_]\w*)\}?|(\*\*|[-+*/%()]))")


def arithmetic(expression, job_id):
    """The value of a bash ``$((…))`` expression over the job id: integers, + - * / % ** and parentheses,
    as bash computes them (C's truncating division); ``None`` for anything else."""
    tokens, position = [], 0
    expression = expression.strip()
    while position < len(expression):
        match = _ARITHMETIC.match(expression, position)
        if not match or match.end() == position:
            return None
        number, name, operator = match.groups()
        if name is not None and name not in JOB_ID_NAMES:
            return None
        if number is not None and len(number) > 1 and number.startswith("0"):
            return None  # bash reads it as octal
        tokens.append(int(number) if number else job_id if name else operator)
        position = match.end()
        while position < len(expression) and expression[position].isspace():
            position += 1

    def value(index, level):
        """(value, next index) of the operators of ``level`` and above, from ``tokens[index]``."""
        if level == 3:
            token = tokens[index] if index < len(tokens) else None
            if token in ("-", "+"):
                operand, index = value(index + 1, 3)
                return (-operand if token == "-" else operand), index
            if token == "(":
                inner, index = value(index + 1, 0)
                if index >= len(tokens) or tokens[index] != ")":
                    raise ValueError
                return inner, index + 1
            if isinstance(token, int):
                return token, index + 1
            raise ValueError
        if level == 2:
            base, index = value(index, 3)
            if index < len(tokens) and tokens[index] == "**":
                exponent, index = value(index + 1, 2)
                if not 0 <= exponent < 64:
                    raise ValueError
                return base ** exponent, index
            return base, index
        result, index = value(index, level + 1)
        operators = ("+", "-") if level == 0 else ("*", "/", "%")
        while index < len(tokens) and tokens[index] in operators:
            operator = tokens[index]
            operand, index = value(index + 1, level + 1)
            if operator in "/%" and operand == 0:
                raise ValueError
            quotient = abs(result) // abs(operand) * (1 if (result >= 0) == (operand >= 0) else -1) \
                if operator in "/%" else 0
            result = {"+": result + operand, "-": result - operand, "*": result * operand,
                      "/": quotient, "%": result - quotient * operand}[operator]
        return result, index

    try:
        result, end = value(0, 0)
    except (ValueError, IndexError, TypeError):
        return None
    return result if end == len(tokens) else None


_PARAMETER = re.compile(r"\$\{([A-Za-z_]\w*)(?::(\s*\d+|\s+-\d+|\s*\(\s*-?\d+\s*\))(?::\s*(\d+))?)?\}")
_WORD_PART = re.compile(r'"|(\d+)|(\$\(\()|' + _PARAMETER.pattern + r"|\$([A-Za-z_]\w*)")


def _parameter(name, offset, length, job_id):
    """``${name}``, ``${name: -4}``, ``${name:1:3}`` of the job id as bash expands it; ``None`` for another name."""
    if name not in JOB_ID_NAMES:
        return None
    shown = str(job_id)
    if offset is not None:
        start = int(offset.strip().strip("()"))
        start = max(len(shown) + start, 0) if start < 0 else start
        shown = shown[start:start + int(length)] if length is not None else shown[start:]
    return shown


def port_for(value, job_id):
    """The port ``MASTER_PORT=value`` gives for ``job_id``: digits, ``$((…))``, ``$SLURM_JOB_ID`` and
    ``${SLURM_JOB_ID: -4}`` joined as bash joins them; ``None`` where this reading cannot tell."""
    text, position = "", 0
    while position < len(value):
        match = _WORD_PART.match(value, position)
        if not match:
            return None
        digits, opens_arithmetic, name, offset, length, plain = match.groups()
        position = match.end()
        if opens_arithmetic:
            depth, end = 2, position
            while end < len(value) and depth:
                depth += {"(": 1, ")": -1}.get(value[end], 0)
                end += 1
            if depth:
                return None
            inner = _PARAMETER.sub(lambda found: _parameter(*found.groups(), job_id) or "?", value[position:end - 2])
            computed = arithmetic(inner, job_id)
            if computed is None:
                return None
            text, position = text + str(computed), end
        elif digits is not None:
            text += digits
        elif (name or plain) is not None:
            shown = _parameter(name or plain, offset, length, job_id)
            if shown is None:
                return None
            text += shown
    return int(text) if re.fullmatch(r"-?\d+", text) else None
