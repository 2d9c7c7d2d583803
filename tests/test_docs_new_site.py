"""The instructor kit's "Bringing the workshop to another SLURM site" (issue 46 item 4), held to the real commands.

The section's command lines are the ones an instructor types at a new centre: every ``ddp-tutorial`` line
parses with the CLI's own parser and every option of a script line is one its ``--help`` names (a renamed
option or subcommand fails here, not at the centre); the Turkish twin has the same commands (its structure is
checked by tests/test_translation_guards.py). On the lab in TRUBA's shape the section's ``site`` lines run as
written on the login node, one after the other in one folder (before ``site plan``, the marked fields are
filled as the kit's step 2 says, with TRUBA's written values), and each ```text block the section quotes is
what they print (``…`` stands for the part that differs from run to run).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import placeholders  # tests/helpers: the style sheet's placeholder table
import pytest

from ddp_tutorial.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "docs" / "instructor" / "README.md"
KIT_TR = REPO / "docs" / "instructor" / "README.tr.md"
HEADING = "## Bringing the workshop to another SLURM site"
HEADING_TR = "## Atölyeyi başka bir SLURM merkezine taşımak"


def section(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"{path.relative_to(REPO)} has no section '{heading}'"
    return match.group(1)


def blocks(text: str, kind: str) -> list:
    """The ```kind blocks of ``text``, in order."""
    return re.findall(rf"^```{kind}\n(.*?)^```", text, re.S | re.M)


def command_lines(text: str) -> list:
    """Every command line of the section's bash blocks: continuations joined, comments dropped."""
    lines = []
    for block in blocks(text, "bash"):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_the_section_exists_in_both_languages_with_the_same_commands():
    english, turkish = command_lines(section(KIT, HEADING)), command_lines(section(KIT_TR, HEADING_TR))
    assert english == [placeholders.to_english(line) for line in turkish]  # HESAP ↔ ACCOUNT (docs/style.tr.md)
    assert any(line.startswith("ddp-tutorial site derive ") for line in english), english


def test_every_ddp_tutorial_line_parses_and_every_script_option_exists():
    lines = command_lines(section(KIT, HEADING))
    parser = build_parser()
    for line in lines:
        words = shlex.split(line)
        if words[0] == "ddp-tutorial":
            try:
                parser.parse_args(words[1:])
            except SystemExit:
                pytest.fail(f"the kit's line does not parse: {line}")
        elif words[0].endswith("python") and words[1].startswith("scripts/"):
            helped = subprocess.run([sys.executable, words[1], "--help"], cwd=REPO, capture_output=True, text=True,
                                    timeout=60)
            assert helped.returncode == 0, helped.stderr
            for option in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
                assert option in helped.stdout, f"{words[1]} has no {option}: {line}"


def fill_as_a_person_would(path: Path, rules: dict) -> None:
    """Fill every TO FILL field of the derived table at ``path`` as the kit says (write the value, take its name
    out of ``to_fill``), with the values ``rules`` (a site table read with tomllib) states for the same table or
    partition: the centre's written rules, here TRUBA's."""
    import json

    derived = tomllib.loads(path.read_text(encoding="utf-8"))
    wanted = {name: derived[name]["to_fill"] for name in ("login", "caps", "storage", "day")
              if derived.get(name, {}).get("to_fill")}
    wanted.update({f"partitions.{name}": table["to_fill"]
                   for name, table in derived["partitions"].items() if table.get("to_fill")})
    out, table = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        header = re.match(r"^\[(.+)\]\s*$", line)
        if header:
            table = header.group(1)
        source = rules["partitions"].get(table.split(".", 1)[1], {}) if table.startswith("partitions.") else \
            rules.get(table, {})
        field = re.match(r"^(?:# )?(\w+) = ", line)
        if field and field.group(1) == "to_fill":
            line = "to_fill = []"
        elif field and field.group(1) in wanted.get(table, ()):
            name = field.group(1)
            value = source.get(name, derived.get(table, {}).get(name))
            if name == "min_cores" and value is None:
                value = 1
            if name == "gpu_only" and value is None:
                value = False
            line = f"{name} = {json.dumps(value, ensure_ascii=False)}"
        out.append(line)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def quoted_lines_appear(quoted: str, printed: str) -> list:
    """The quoted lines that no printed line matches (``…`` in a quoted line: any text)."""
    missing = []
    printed_lines = printed.splitlines()
    for line in quoted.splitlines():
        if not line.strip():
            continue
        pattern = "^" + ".*".join(re.escape(part) for part in line.rstrip().split("…")) + r"\s*$"
        if not any(re.match(pattern, p.rstrip()) for p in printed_lines):
            missing.append(line)
    return missing


@pytest.mark.slurm
def test_the_site_lines_run_as_written_on_the_truba_lab_and_print_what_the_kit_quotes(truba_lab, tmp_path):
    text = section(KIT, HEADING)
    site_lines = [line for line in command_lines(text)
                  if line.startswith("ddp-tutorial site ") and "$" not in line]
    assert [shlex.split(line)[2] for line in site_lines] == ["derive", "show", "plan"], site_lines
    env = dict(truba_lab.env, DDP_TUTORIAL_LANG="en", PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}:{truba_lab.env['PATH']}")
    env.pop("DDP_TUTORIAL_SITE", None)
    printed = ""
    truba = tomllib.loads((REPO / "ddp_tutorial" / "sites" / "truba.toml").read_text(encoding="utf-8"))
    for line in site_lines:
        if " plan " in line:  # step 2 of the kit: the marked fields filled, here with TRUBA's written rules
            fill_as_a_person_would(tmp_path / "mysite.toml", truba)
        done = subprocess.run(truba_lab.login_command(["bash", "-c", line]), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, f"{line}\n{done.stdout}\n{done.stderr}"
        printed += done.stdout + done.stderr
    assert (tmp_path / "mysite.toml").is_file()
    quoted = blocks(text, "text")
    assert quoted, "the section quotes no output"
    for block in quoted:
        assert not quoted_lines_appear(block, printed), (
            f"the kit quotes lines the commands do not print: {quoted_lines_appear(block, printed)}\n--- printed:\n"
            + printed)
