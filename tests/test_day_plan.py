"""The workshop day from the site table (ddp_tutorial/day_plan.py, `ddp-tutorial site plan|show`): T5-6, T5-9, P3.

The numbers are the review's §4 arithmetic, computed from ddp_tutorial/sites/truba.toml: 05's reservation on
akya-cuda (15 nodes = 62 % for everyone at once, 8 = 33 % in pairs) and barbun-cuda (30 > 24 nodes: impossible;
15 in pairs), and per account type the session plus 05's job against the cap (master's 4 + 20 = 24 <= 40,
undergraduate 4 + 20 > 4).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import day_plan, sites
from ddp_tutorial.cli import main

TRUBA = sites.load("truba")


def _reservations(plan):
    return {(r.partition, r.pairs): r for r in plan.reservations}


def test_the_reservation_sizes():
    plan = day_plan.plan(TRUBA, 30)
    r = _reservations(plan)
    assert (r["akya-cuda", True].nodes, round(r["akya-cuda", True].share)) == (8, 33)
    assert (r["akya-cuda", False].nodes, int(r["akya-cuda", False].share)) == (15, 62)
    assert (r["barbun-cuda", True].nodes, r["barbun-cuda", True].possible) == (15, True)
    assert (r["barbun-cuda", False].nodes, r["barbun-cuda", False].available, r["barbun-cuda", False].possible) == (
        30, 24, False)
    assert r["akya-cuda", True].per_node == 4 and r["barbun-cuda", True].per_node == 2  # by GPUs and by cores
    assert plan.window_hours == 1.75
    assert r["akya-cuda", False].gpu_hours == 15 * 4 * 1.75 and r["barbun-cuda", True].gpu_hours == 52.5
    assert plan.chosen() is r["akya-cuda", False] and day_plan.plan(TRUBA, 30, pairs=True).chosen().nodes == 8
    assert _reservations(day_plan.plan(TRUBA, 7))["akya-cuda", True].nodes == 2  # 4 jobs × 2 nodes / 4 per node


def test_the_sessions_fit_debug_and_are_not_in_the_reservation():
    plan = day_plan.plan(TRUBA, 30)
    assert (plan.session_partition, plan.session_cores, plan.session_time) == ("debug", 4, "03:00:00")
    assert plan.session_violations == () and plan.sessions_too_long == () and plan.job_violations == ()
    assert plan.session_cores_at_once == 120
    assert plan.job_cores_per_node == 10


def test_a_layout_that_breaks_a_rule_is_said(tmp_path):
    """The same plan with 4-core sessions on barbun (minimum 20) and a 5-hour session window."""
    text = Path(sites.__file__).with_name("truba.toml").read_text(encoding="utf-8")
    text = text.replace('session_partition = "debug"', 'session_partition = "barbun"')
    text = text.replace('sessions = [["09:00", "11:45"], ["12:45", "15:00"]]', 'sessions = [["09:00", "14:00"]]')
    path = tmp_path / "bent.toml"
    path.write_text(text, encoding="utf-8")
    plan = day_plan.plan(sites.load_file(path), 30)
    assert [v.rule for v in plan.session_violations] == ["min_cores"]
    assert plan.sessions_too_long == (("09:00", "14:00"),)
    out = day_plan.format_plan(plan, "en")
    assert "!! barbun: at least 20 cores per job" in out and "!! the session 09:00–14:00 is longer" in out


def test_account_types_against_the_caps():
    accounts = {a.kind: a for a in day_plan.plan(TRUBA, 30).accounts}
    assert (accounts["masters"].cap, accounts["masters"].at_once, accounts["masters"].day_ok) == (40, 24, True)
    assert (accounts["undergraduate"].cap, accounts["undergraduate"].session_ok,
            accounts["undergraduate"].day_ok) == (4, True, False)
    assert accounts["phd"].cap == 160 and accounts["phd"].day_ok


@pytest.mark.parametrize("lang,lines", [
    ("en", ["akya-cuda, all at once (30 jobs, 60 GPUs): 15 of 24 nodes (62 %), 105 GPU-hours",
            "akya-cuda, in pairs (15 jobs, 30 GPUs): 8 of 24 nodes (33 %), 56 GPU-hours",
            "!! barbun-cuda, all at once (30 jobs, 60 GPUs): 30 nodes needed, the partition has 24: impossible",
            "barbun-cuda, in pairs (15 jobs, 30 GPUs): 15 of 24 nodes (62 %), 52.5 GPU-hours",
            "master's, cap 40: 4 + 20 = 24 ≤ 40: ok",
            "!! undergraduate, cap 4: the session (4 ≤ 4) only; with 05's job 4 + 20 = 24 > 4",
            "the sessions are NOT in the GPU reservation",
            "reservation 12:45–14:30 (1.75 h)"]),
    ("tr", ["akya-cuda, herkes aynı anda (30 iş, 60 GPU): 24 düğümden 15 tanesi (%62), 105 GPU-saat",
            "barbun-cuda, ikişerli gruplar (15 iş, 30 GPU): 24 düğümden 15 tanesi (%62), 52,5 GPU-saat",
            "30 düğüm gerekir, kuyrukta 24 düğüm var: olanaksız",
            "yüksek lisans, sınır 40: 4 + 20 = 24 ≤ 40: uygun",
            "oturumlar GPU rezervasyonunda DEĞİL",
            "rezervasyon 12:45–14:30 (1,75 saat)"]),
])
def test_site_plan_prints_the_numbers_in_the_users_language(lang, lines, capsys, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    assert main(["site", "plan", "--site", "truba", "--attendees", "30"]) == 0
    out = capsys.readouterr().out
    for line in lines:
        assert line in out, (line, out)


def test_site_show_prints_every_value_with_its_source(capsys, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    assert main(["site", "show", "--site", "truba"]) == 0
    out = capsys.readouterr().out
    assert "2-temel_bilgiler/gpu.rst:46" in out and "hesaplama_kumeleri.rst:154" in out
    assert "arf-ui1" in out and "5-sikca_sorulan_sorular/index.rst:214" in out
    assert "the guide does not say:" in out  # debug's silent fields


@pytest.mark.parametrize("args,words", [(["plan", "--site", "nowhere"], "unknown site 'nowhere'"),
                                        (["plan", "--attendees", "0"], "--attendees 0")])
def test_bad_input_is_one_line(args, words):
    out = subprocess.run([sys.executable, "-m", "ddp_tutorial.cli", "site", *args], capture_output=True, text=True,
                         env={"DDP_TUTORIAL_LANG": "en", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 2 and words in out.stderr and out.stderr.count("\n") == 1, out.stderr
