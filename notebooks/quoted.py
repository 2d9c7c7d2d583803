"""The numbers the prose quotes, each read from where it comes from.

A measured figure, a count or a tolerance written into a sentence goes stale the day its source
changes. So a markdown cell of ``notebooks/src/*.cells`` does not write such a number: it writes
``⟦name⟧`` and ``notebooks/build.py`` fills in the value of ``QUOTES[name]`` the way the notebook's
language writes numbers (Turkish ``47.016`` and ``0,82``, English ``47,016`` and ``0.82``).
The docs have no build: ``IN_TEXT`` lists their sentences (and the strings of code cells) that
quote a number, written with the same ``⟦name⟧``, and ``tests/test_quoted_numbers.py`` finds each
one, filled in, in its file. Either way a number that changes at its source changes the text or
fails a test that names the sentence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
RECORD = "ddp_tutorial/results/cpu-2core-fashion-mnist.json"  # benchmarks/throughput.py's record (04, 06)
CONTENTION = "benchmarks/results/contention-cpu-2core.json"  # the package's wait policy (06)
SPINNING = "benchmarks/results/contention-cpu-2core-spinning.json"  # the same run with spinning waits (06)
H200 = "benchmarks/results/gpu-h200.json"  # python -m benchmarks.gpu on one H200 (04, 06, kit)
COMM = "benchmarks/results/comm-cpu-2core.json"  # python -m benchmarks.comm --world 2 (06)
LR_RULES = "benchmarks/results/lr-rules-mnist.json"  # benchmarks/lr_rules.py (06's summary)
HEADLINE = "benchmarks/results/seed-headline-cpu-2core.json"  # python -m benchmarks.seed_headline (01, 04, 06)
PRECISION = "benchmarks/results/proof-precision-mnist.json"  # 08's proof in float32 and float64 (kit)
MARK = re.compile(r"⟦([^⟦⟧]*)⟧")

# The live world 2 / world 1 medians that 04's prose says runs of 04 on this machine give
# (tests/test_quoted_numbers.py checks that every stored run of 04 falls inside).
LIVE_MEDIANS = (0.5, 0.9)


@lru_cache(maxsize=None)
def read_json(relative: str) -> dict:
    return json.loads((ROOT / relative).read_text(encoding="utf-8"))


def _contention(path: str, row: str, condition: str) -> float:
    return read_json(path)["contention"]["rows"][row][condition]["samples_per_second"]


def _reached(world: int, scaled: bool, field: str) -> float:
    """Where the record's run of ``world`` processes (with ``--scale-lr`` or not) reached 85 %."""
    curves = read_json(RECORD)["time_to_accuracy"]["curves"]
    curve = next(c for c in curves if c["world_size"] == world and c["scale_lr"] == scaled)
    return curve["reached"][field]


def _reach(world: int, scaled: bool) -> dict:
    """The three quotes of one time-to-85 % run: epochs, steps, seconds."""
    name = f"reach.w{world}{'_scaled' if scaled else ''}"
    where = f"{RECORD} time_to_accuracy (world {world}, scale_lr {scaled}) reached."
    return {f"{name}.epochs": Quote(where + "epoch", lambda: _reached(world, scaled, "epoch")),
            f"{name}.steps": Quote(where + "steps", lambda: _reached(world, scaled, "steps")),
            f"{name}.seconds": Quote(where + "train_seconds", lambda: _reached(world, scaled, "train_seconds"), 1)}


def _headline(config: str, field: str) -> float:
    return read_json(HEADLINE)["summary"][config][field]


def _loss_range(losses: list, epoch: int, end) -> float:
    """The smallest (``end=min``) or largest per-rank loss sum of ``epoch`` (0 or 1)."""
    return end(losses[epoch])


def _headline_quotes() -> dict:
    """The seed's recipe and the same model at world 1, 5 seeds each (01, 04, 06)."""
    where = HEADLINE + " summary."
    quotes = {}
    for config in ("seed", "world1"):
        for end in ("min", "max", "mean"):
            quotes[f"headline.{config}.{end}"] = Quote(
                f"{where}{config}.test_accuracy_{end}",
                lambda config=config, end=end: _headline(config, f"test_accuracy_{end}"), 2)
    for epoch in (0, 1):
        for end, pick in (("min", 0), ("max", 1)):
            quotes[f"headline.seed.loss{epoch + 1}.{end}"] = Quote(
                f"{where}seed.rank_loss_range[{epoch}][{pick}]",
                lambda epoch=epoch, pick=pick: _headline("seed", "rank_loss_range")[epoch][pick], 2)
            quotes[f"headline.printed.loss{epoch + 1}.{end}"] = Quote(
                f"{HEADLINE} seed_printed.rank_losses[{epoch}] ({end})",
                lambda epoch=epoch, end=end: _loss_range(read_json(HEADLINE)["seed_printed"]["rank_losses"], epoch,
                                                         min if end == "min" else max), 2)
    quotes["headline.printed.accuracy"] = Quote(HEADLINE + " seed_printed.test_accuracy",
                                                lambda: read_json(HEADLINE)["seed_printed"]["test_accuracy"], 2)
    return quotes


def _exercises(first: str, last: str) -> int:
    """The ``=== exercise`` blocks of the notebooks ``first``…``last`` (by the sources' two digits)."""
    return sum(line.startswith("=== exercise ")
               for path in sorted((ROOT / "notebooks" / "src").glob("*.cells")) if first <= path.name[:2] <= last
               for line in path.read_text(encoding="utf-8").splitlines())


def _all_exercises() -> int:
    from ddp_tutorial import exercises
    return len(exercises.EXERCISES)


def _exact() -> float:
    from ddp_tutorial.exercises import capstone
    return capstone.EXACT


def _wait_minutes() -> float:
    """The minutes 05's cell waits for its job: ``slurm.wait(job_id, timeout=SECONDS, …)`` in its code."""
    code = (ROOT / "notebooks" / "src" / "05_cluster_slurm.cells").read_text(encoding="utf-8")
    return int(re.search(r"slurm\.wait\(job_id, timeout=(\d+)", code).group(1)) / 60


def _live_images() -> int:
    """The images of one live round in 04: ``train_subset=…`` of its ``quick`` configuration."""
    code = (ROOT / "notebooks" / "src" / "04_ddp_training.cells").read_text(encoding="utf-8")
    return int(re.search(r"quick = TrainConfig\(.*?train_subset=([\d_]+)", code).group(1).replace("_", ""))


def _stop_every() -> int:
    """``STOP_CHECK_EVERY = N`` wherever the package defines it (read, not imported: no torch to load)."""
    found = {int(m.group(1)) for path in (ROOT / "ddp_tutorial").rglob("*.py")
             for m in re.finditer(r"^STOP_CHECK_EVERY = (\d+)", path.read_text(encoding="utf-8"), re.M)}
    assert len(found) == 1, f"STOP_CHECK_EVERY defined {len(found)} times in ddp_tutorial/"
    return found.pop()


def _day_profile() -> str:
    from ddp_tutorial import slurm
    return slurm.day_profile({}).name


@dataclass(frozen=True)
class Quote:
    """A number the prose quotes: ``read()`` gives it from ``source``; ``style`` says how it is written:
    ``number`` (``decimals`` places, thousands grouped), ``percent`` (``%21`` / ``21 %``),
    ``exp`` (``1e-12`` in both languages) or ``text`` (a name, as it is)."""
    source: str
    read: Callable[[], object]
    decimals: int = 0
    style: str = "number"


QUOTES = {
    # The throughput record (04's figure, 06's scaling section)
    "record.world1": Quote(RECORD + " scaling.1", lambda: read_json(RECORD)["scaling"]["1"]["samples_per_second"]),
    "record.world2": Quote(RECORD + " scaling.2", lambda: read_json(RECORD)["scaling"]["2"]["samples_per_second"]),
    "record.ratio": Quote(RECORD + " scaling.2.speedup", lambda: read_json(RECORD)["scaling"]["2"]["speedup"], 2),
    "record.efficiency": Quote(RECORD + " scaling.2.efficiency",
                               lambda: 100 * read_json(RECORD)["scaling"]["2"]["efficiency"], 0, "percent"),
    "record.compute_ms": Quote(RECORD + " communication.0.compute",
                               lambda: read_json(RECORD)["communication"][0]["compute"], 2),
    "record.ddp_ms": Quote(RECORD + " communication.0.ddp", lambda: read_json(RECORD)["communication"][0]["ddp"], 2),
    "record.wait_ms": Quote(RECORD + " communication.0.ddp − compute",
                            lambda: read_json(RECORD)["communication"][0]["ddp"]
                            - read_json(RECORD)["communication"][0]["compute"]),
    "record.gradient_kb": Quote(RECORD + " communication.0.gradient_bytes // 1024",
                                lambda: read_json(RECORD)["communication"][0]["gradient_bytes"] // 1024),
    **_reach(1, False), **_reach(2, False), **_reach(2, True),
    # Overlapping the all-reduce with the backward pass, against one single-threaded rank (06)
    "comm.limit_no_overlap": Quote(COMM + " limit_no_overlap", lambda: read_json(COMM)["limit_no_overlap"], 2),
    "comm.limit_overlap": Quote(COMM + " limit_overlap", lambda: read_json(COMM)["limit_overlap"], 2),
    "comm.ddp": Quote(COMM + " ddp_speedup", lambda: read_json(COMM)["ddp_speedup"], 2),
    "comm.buckets": Quote(COMM + " ddp_buckets_speedup", lambda: read_json(COMM)["ddp_buckets_speedup"], 2),
    "live.images": Quote("notebooks/src/04_ddp_training.cells quick = TrainConfig(train_subset=…)", _live_images),
    "live.low": Quote("notebooks/quoted.py LIVE_MEDIANS (checked against 04's stored runs)",
                      lambda: LIVE_MEDIANS[0], 1),
    "live.high": Quote("notebooks/quoted.py LIVE_MEDIANS (checked against 04's stored runs)",
                       lambda: LIVE_MEDIANS[1], 1),
    **_headline_quotes(),
    # The wait policy beside a busy process (06)
    "spin.idle": Quote(SPINNING + " package.idle", lambda: _contention(SPINNING, "package", "idle")),
    "spin.loaded": Quote(SPINNING + " package.loaded", lambda: _contention(SPINNING, "package", "loaded")),
    "spin.loaded_over_idle": Quote(SPINNING + " ratios.loaded_over_idle",
                                   lambda: read_json(SPINNING)["contention"]["ratios"]["loaded_over_idle"], 2),
    "policy.idle": Quote(CONTENTION + " package.idle", lambda: _contention(CONTENTION, "package", "idle")),
    "policy.loaded": Quote(CONTENTION + " package.loaded", lambda: _contention(CONTENTION, "package", "loaded")),
    "policy.loaded_over_idle": Quote(CONTENTION + " ratios.loaded_over_idle",
                                     lambda: read_json(CONTENTION)["contention"]["ratios"]["loaded_over_idle"], 2),
    "policy.idle_over_spin_idle": Quote(CONTENTION + " package.idle / " + SPINNING + " package.idle",
                                        lambda: _contention(CONTENTION, "package", "idle")
                                        / _contention(SPINNING, "package", "idle"), 2),
    "seed.loaded": Quote(CONTENTION + " seed.loaded", lambda: _contention(CONTENTION, "seed", "loaded")),
    "policy.over_seed_loaded": Quote(CONTENTION + " ratios.package_over_seed_loaded",
                                     lambda: read_json(CONTENTION)["contention"]["ratios"]["package_over_seed_loaded"],
                                     1),
    # A rank killed under NCCL on one H200 (04, 06, the kit, troubleshooting)
    "h200.plain_ms": Quote(H200 + " ddp_step.plain_step_ms", lambda: read_json(H200)["ddp_step"]["plain_step_ms"], 2),
    "h200.ddp_ms": Quote(H200 + " ddp_step.ddp_step_ms", lambda: read_json(H200)["ddp_step"]["ddp_step_ms"], 2),
    "h200.survivor_s": Quote(H200 + " pair_kill.survivor_seconds",
                             lambda: read_json(H200)["pair_kill"]["survivor_seconds"], 1),
    # Code and catalogue
    "exercises.all": Quote("ddp_tutorial.exercises.EXERCISES", _all_exercises),
    "exercises.01_06": Quote("'=== exercise' blocks of notebooks/src/01…06", lambda: _exercises("01", "06")),
    "capstone.exact": Quote("ddp_tutorial.exercises.capstone.EXACT", _exact, style="exp"),
    "proof.float32_smallest": Quote(PRECISION + " smallest float32 gap of its builds",
                                    lambda: min(run["float32"]["gap"] for run in read_json(PRECISION).values()),
                                    style="exp"),
    "proof.float32_gap": Quote(PRECISION + " largest float32 gap of its builds",
                               lambda: max(run["float32"]["gap"] for run in read_json(PRECISION).values()),
                               style="exp"),
    "05.wait_minutes": Quote("notebooks/src/05_cluster_slurm.cells slurm.wait(job_id, timeout=…) / 60",
                             _wait_minutes),
    "stop.every": Quote("ddp_tutorial's STOP_CHECK_EVERY", _stop_every),
    "day.profile": Quote("ddp_tutorial.slurm.day_profile() (05's job on a CPU session)", _day_profile, style="text"),
}


def number(name: str) -> float:
    return QUOTES[name].read()


# What the prose says about these numbers in words; each must still hold for the numbers of today.
CLAIMS = {
    "04, 06: world 2 is slower than world 1 on these 2 cores": lambda: number("record.ratio") < 1,
    "04: the live ratio comes out higher than the record": lambda: number("live.low") > number("record.ratio"),
    "06: with the same lr world 2 needs one more epoch for 85 %":
        lambda: number("reach.w2.epochs") == number("reach.w1.epochs") + 1,
    "06: --scale-lr wins that epoch back": lambda: number("reach.w2_scaled.epochs") == number("reach.w1.epochs"),
    "06: world 1 still reaches 85 % first": lambda: number("reach.w1.seconds") < number("reach.w2_scaled.seconds"),
    "06: the package's policy stays near its idle rate under load": lambda: number("policy.loaded_over_idle") > 0.9,
    "06: the policy's idle rate is below the spinning one": lambda: number("policy.idle") < number("spin.idle"),
    "04: the seed's printed accuracy lies in the range of the 5 seeds here":
        lambda: number("headline.seed.min") <= number("headline.printed.accuracy") <= number("headline.seed.max"),
    "06: more GPUs, a worse model (the seed's recipe below world 1)":
        lambda: number("headline.seed.mean") < number("headline.world1.mean"),
    "08: the float64 check's tolerance is above float64 rounding and below float32 rounding":
        lambda: max(run["float64"]["gap"] for run in read_json(PRECISION).values()) < number("capstone.exact")
        < number("proof.float32_smallest"),
    "06: the linear rule won for both Adam and SGD (3 seeds)":
        lambda: read_json(LR_RULES)["winners"] == {"adam": "linear", "sgd": "linear"}
        and len(read_json(LR_RULES)["seeds"]) == 3,
}


def written(value, lang: str, decimals: int = 0, style: str = "number") -> str:
    """``value`` as the prose of ``lang`` writes it (thousands always grouped, as the prose does:
    Turkish 2.954 and 0,82; English 2,954 and 0.82)."""
    if style == "text":
        return str(value)
    if style == "exp":
        return f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e+")
    text = f"{value:,.{decimals}f}"
    if lang == "tr":
        text = text.translate(str.maketrans(",.", ".,"))
    if style == "percent":
        return f"%{text}" if lang == "tr" else f"{text} %"
    return text


class QuoteError(ValueError):
    """A quote whose source cannot be read (its message names the quote and the source)."""


def value(name: str, lang: str) -> str:
    quote = QUOTES[name]
    try:
        return written(quote.read(), lang, quote.decimals, quote.style)
    except (OSError, KeyError, IndexError, ValueError, AttributeError, StopIteration, AssertionError) as error:
        raise QuoteError(f"⟦{name}⟧ cannot be read from {quote.source} ({type(error).__name__}: {error}); "
                         f"restore the source or change the quote in notebooks/quoted.py") from None


def unknown(text: str) -> list:
    """The ``⟦name⟧`` marks of ``text`` that name no quote."""
    return [m.group(1) for m in MARK.finditer(text) if m.group(1) not in QUOTES]


def fill(text: str, lang: str) -> str:
    """``text`` with every ``⟦name⟧`` replaced by the quote's value written in ``lang``."""
    return MARK.sub(lambda m: value(m.group(1), lang), text)


# Sentences outside the notebooks' markdown that quote a number: (file, language, the words around
# it with ⟦name⟧ where the number stands). The test finds each one, filled in, in its file, with
# line breaks read as spaces.
IN_TEXT = [
    # The instructor kit: the exercises, the proof's tolerance, a killed rank under NCCL (review F2, F3, F11)
    ("docs/instructor/README.md", "en", "(⟦exercises.all⟧ in all: ⟦exercises.01_06⟧ in 01–06"),
    ("docs/instructor/README.tr.md", "tr", "toplam ⟦exercises.all⟧ denetlenen alıştırma var (01–06'da "
                                           "⟦exercises.01_06⟧,"),
    ("docs/instructor/README.md", "en", "agree to ≤ ⟦capstone.exact⟧ in float64 (08 checks that; in float32 "
                                        "rounding alone reaches ⟦proof.float32_gap⟧)"),
    ("docs/instructor/README.tr.md", "tr", "float64'te ≤ ⟦capstone.exact⟧ farkla aynı olmalı (08 bunu denetler; "
                                           "float32'de yalnızca yuvarlama farkı ⟦proof.float32_gap⟧ düzeyine varır)"),
    ("docs/instructor/README.md", "en", "an exit within ⟦h200.survivor_s⟧ s on one H200, not tested across nodes"),
    ("docs/instructor/README.tr.md", "tr", "bir H200'de ⟦h200.survivor_s⟧ s içinde çıkış, düğümler arasında "
                                           "sınanmadı"),
    ("docs/instructor/README.md", "en", "the survivor exited within ⟦h200.survivor_s⟧ s on one H200"),
    ("docs/instructor/README.tr.md", "tr", "kalan süreç bir H200'de ⟦h200.survivor_s⟧ s içinde çıktı"),
    ("docs/instructor/README.md", "en", "exited with code 3 within ⟦h200.survivor_s⟧ s on one H200, two ranks on "
                                        "one GPU"),
    ("docs/instructor/README.tr.md", "tr", "kalan rank bir H200'de ⟦h200.survivor_s⟧ s içinde 3 koduyla çıktı "
                                           "(tek GPU'da iki rank"),
    ("docs/troubleshooting.md", "en", "a survivor left within ⟦h200.survivor_s⟧ s with code 3"),
    ("docs/troubleshooting.tr.md", "tr", "gloo grubu sayesinde ⟦h200.survivor_s⟧ s içinde 3 koduyla çıktı"),
    # The TRUBA page: the job 05 shows on a CPU session (review F1)
    ("docs/truba.md", "en", "05 shows ⟦day.profile⟧ by default"),
    ("docs/truba.tr.md", "tr", "05 varsayılan olarak ⟦day.profile⟧'yı gösterir"),
    # slurm/README: when the ranks stop after SIGUSR1 (review F7)
    ("slurm/README.md", "en", "⟦stop.every⟧ steps (next stop vote)"),
    ("slurm/README.md", "en", "within ⟦stop.every⟧ steps (the next stop vote) all ranks agree to stop"),
    ("slurm/README.md", "tr", "en geç ⟦stop.every⟧ adım içinde (bir sonraki durma oylamasında)"),
    # 08's proof prints the tolerance it checks with (code cells: one string per language)
    ("notebooks/src/08_own_model.cells", "en", "(float64 weights, ≤ ⟦capstone.exact⟧):"),
    ("notebooks/src/08_own_model.cells", "tr", "(float64, ≤ ⟦capstone.exact⟧):"),
]
