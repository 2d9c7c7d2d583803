"""Issue 28, requirement 3: everything an attendee sees of an exercise is in the notebook's language.

The placeholder cell (its docstring from ``ex.<name>.doc``, the capstone's skeleton, the stubs) and the
solution ``solution()`` prints and ``notebooks/build.py --solutions`` writes: the solution's comments are
written ``⟪tr‖en⟫`` and resolved per language. Under ``tr`` no marker and no English comment is left;
the two languages differ only in comments and docstrings (the same code, token for token in the AST).
No engines: nothing here runs an exercise.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial import i18n
from ddp_tutorial.exercises import capstone
from ddp_tutorial.exercises.core import DOC

MARKERS = re.compile("[⟪⟫‖]")
MAX_LINE = 100  # notebooks/build.py: longer code lines are clipped in JupyterLab
# What a comment may hold and still be the same in both languages: code, names, numbers, TODO tags.
CODELIKE = re.compile(r"`[^`]*`|\b\w*\d\w*\b|\b\w+(\.\w+|\(\)?|_\w+|=\S*)+|--?[\w-]+|\b[A-Z][A-Z0-9_]+\b"
                      r"|[\d.,:%×/+-]+\w*|noqa(:\s*[A-Z0-9, ]+)?")
WORD = re.compile(r"[^\W\d_]{2,}")


def comments(code: str) -> list:
    tokens = tokenize.generate_tokens(io.StringIO(code + "\n").readline)
    return [tok.string for tok in tokens if tok.type == tokenize.COMMENT]


def worded(comment: str) -> bool:
    return bool(WORD.search(CODELIKE.sub(" ", comment.lstrip("#"))))


def without_docstrings(code: str) -> str:
    """The AST of ``code`` with every docstring removed (comments are not in an AST)."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def docstrings(code: str) -> list:
    return [ast.get_docstring(node) for node in ast.walk(ast.parse(code))
            if isinstance(node, (ast.FunctionDef, ast.Module)) and ast.get_docstring(node)]


def assert_in_its_language(tr: str, en: str, what: str) -> None:
    """``tr`` and ``en``: no marker, the same code, and every worded comment and docstring translated."""
    for lang, code in (("tr", tr), ("en", en)):
        assert not MARKERS.search(code), f"{what} ({lang}) still holds a ⟪…‖…⟫ marker:\n{code}"
    assert without_docstrings(tr) == without_docstrings(en), f"{what}: tr and en differ in more than comments"
    tr_comments, en_comments = comments(tr), comments(en)
    assert len(tr_comments) == len(en_comments), (what, tr_comments, en_comments)
    english = [a for a, b in zip(tr_comments, en_comments) if a == b and worded(a)]
    assert not english, f"{what}: comments left in English under tr: {english}"
    same = set(docstrings(tr)) & set(docstrings(en))
    assert not same, f"{what}: docstrings left in English under tr: {same}"


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.name)
def test_the_placeholder_is_in_the_notebooks_language(exercise):
    tr, en = exercise.placeholder("tr"), exercise.placeholder("en")
    assert_in_its_language(tr, en, f"{exercise.name} placeholder")
    for lang, code in (("tr", tr), ("en", en)):
        long = [line for line in code.splitlines() if len(line) > MAX_LINE]
        assert not long, f"{exercise.name} placeholder ({lang}): lines over {MAX_LINE} characters: {long}"
    if exercise.stub is None:  # the docstring is the message ex.<name>.doc, in each language
        for lang, code in (("tr", tr), ("en", en)):
            (doc,) = docstrings(code)
            assert " ".join(doc.split()) == i18n.t(exercise.key(DOC), lang=lang)


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.name)
def test_the_solution_is_in_the_notebooks_language(exercise, monkeypatch, capsys):
    tr, en = exercise.solution_code("tr"), exercise.solution_code("en")
    assert_in_its_language(tr, en, f"{exercise.name} solution")
    compile(exercise.code, exercise.name, "exec")  # the source itself stays Python (benchmarks exec it)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    exercise.solution()
    shown = capsys.readouterr().out
    assert shown.startswith("Çözüm:") and tr in shown and not MARKERS.search(shown)


def test_every_function_exercise_has_its_docstring_in_both_message_files():
    for exercise in ex.EXERCISES:
        if exercise.stub is None:
            assert exercise.key(DOC) in exercise.message_keys()
            texts = [i18n.messages(lang)[exercise.key(DOC)] for lang in i18n.LANGUAGES]
            assert all(texts) and texts[0] != texts[1], (exercise.name, texts)


def test_the_capstones_fallback_solution_is_in_the_notebooks_language(monkeypatch, capsys):
    """Sections 3–6 of 08 run (and write into cnn_ddp.py) the solution until the attendee's passes."""
    import inspect
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    source = inspect.getsource(capstone.train_function(None))
    assert "(train_ddp'niz ex.train_ddp.check() denetiminden henüz geçmedi" in capsys.readouterr().out
    assert source.strip() == ex.train_ddp.solution_code("tr") and "[5] bu fonksiyonun kurduğu grup" in source


def test_localize_code_resolves_markers_and_refuses_a_stray_one():
    code = "x = 1  # ⟪bir‖one⟫\n# ⟪iki satır\n# Türkçe‖two lines\n# English⟫\n"
    assert i18n.localize_code(code, "tr") == "x = 1  # bir\n# iki satır\n# Türkçe\n"
    assert i18n.localize_code(code, "en") == "x = 1  # one\n# two lines\n# English\n"
    with pytest.raises(ValueError, match="unbalanced"):
        i18n.localize_code("x = 1  # ⟪bir‖one", "tr")
