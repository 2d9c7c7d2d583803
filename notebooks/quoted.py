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


@dataclass(frozen=True)
class Quote:
    """A number the prose quotes: ``read()`` gives it from ``source``; ``style`` says how it is written:
    ``number`` (``decimals`` places, thousands grouped), ``percent`` (``%21`` / ``21 %``),
    ``exp`` (``1e-12`` in both languages) or ``text`` (a name, as it is)."""
    source: str
    read: Callable[[], object]
    decimals: int = 0
    style: str = "number"


def at(path: str, *keys, decimals: int = 0, style: str = "number", then: Callable | None = None,
       says: str = "") -> Quote:
    """The field ``keys`` of the JSON file ``path``; ``then`` turns it into the quoted number, and
    ``says`` how (for the error messages and the test's)."""
    def read():
        found = read_json(path)
        for key in keys:
            found = found[key]
        return found if then is None else then(found)
    return Quote(f"{path} {'.'.join(map(str, keys))}{f' ({says})' if says else ''}", read, decimals, style)


def ratio(top: Quote, bottom: Quote, decimals: int) -> Quote:
    return Quote(f"{top.source} / {bottom.source}", lambda: top.read() / bottom.read(), decimals)


def in_code(path: str, pattern: str, then: Callable = int) -> Quote:
    """The number ``pattern``'s group captures in the file ``path`` (a constant read, not imported)."""
    def read():
        found = {m.group(1) for file in sorted(ROOT.glob(path))
                 for m in re.finditer(pattern, file.read_text(encoding="utf-8"), re.M)}
        if len(found) != 1:
            raise ValueError(f"{pattern!r} found {len(found)} values in {path}, not one")
        return then(found.pop().replace("_", ""))
    return Quote(f"{path} {pattern}", read)


def reached(world: int, scaled: bool, field: str, decimals: int = 0) -> Quote:
    """Where the record's run of ``world`` processes (with ``--scale-lr`` or not) reached 85 %."""
    def pick(curves):
        return next(c for c in curves if c["world_size"] == world and c["scale_lr"] == scaled)["reached"][field]
    return at(RECORD, "time_to_accuracy", "curves", decimals=decimals, then=pick,
              says=f"world {world}, scale_lr {scaled}: reached.{field}")


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


def _day_profile() -> str:
    from ddp_tutorial import slurm
    return slurm.day_profile({}).name


def _gaps(dtype: str, end: Callable) -> Callable:
    """The smallest or largest gap of ``dtype`` over the builds 08's precision run tried (default, avx2, avx512)."""
    return lambda runs: end(run[dtype]["gap"] for run in runs.values())


def _contention(path: str, row: str, condition: str) -> Quote:
    return at(path, "contention", "rows", row, condition, "samples_per_second")


SPIN_IDLE = _contention(SPINNING, "package", "idle")
POLICY_IDLE = _contention(CONTENTION, "package", "idle")
LIVE = "notebooks/quoted.py LIVE_MEDIANS (checked against 04's stored runs)"

QUOTES = {
    # The throughput record (04's figure, 06's scaling section)
    "record.world1": at(RECORD, "scaling", "1", "samples_per_second"),
    "record.world2": at(RECORD, "scaling", "2", "samples_per_second"),
    "record.ratio": at(RECORD, "scaling", "2", "speedup", decimals=2),
    "record.efficiency": at(RECORD, "scaling", "2", "efficiency", style="percent", then=lambda x: 100 * x,
                            says="× 100"),
    "record.compute_ms": at(RECORD, "communication", 0, "compute", decimals=2),
    "record.ddp_ms": at(RECORD, "communication", 0, "ddp", decimals=2),
    "record.wait_ms": at(RECORD, "communication", 0, then=lambda c: c["ddp"] - c["compute"], says="ddp − compute"),
    "record.gradient_kb": at(RECORD, "communication", 0, "gradient_bytes", then=lambda b: b // 1024, says="// 1024"),
    "reach.w1.epochs": reached(1, False, "epoch"),
    "reach.w1.steps": reached(1, False, "steps"),
    "reach.w1.seconds": reached(1, False, "train_seconds", 1),
    "reach.w2.epochs": reached(2, False, "epoch"),
    "reach.w2.steps": reached(2, False, "steps"),
    "reach.w2.seconds": reached(2, False, "train_seconds", 1),
    "reach.w2_scaled.epochs": reached(2, True, "epoch"),
    "reach.w2_scaled.steps": reached(2, True, "steps"),
    "reach.w2_scaled.seconds": reached(2, True, "train_seconds", 1),
    # 04's live rounds
    "live.images": in_code("notebooks/src/04_ddp_training.cells", r"quick = TrainConfig\(.*?train_subset=([\d_]+)"),
    "live.low": Quote(LIVE, lambda: LIVE_MEDIANS[0], 1),
    "live.high": Quote(LIVE, lambda: LIVE_MEDIANS[1], 1),
    # Overlapping the all-reduce with the backward pass, against one single-threaded rank (06)
    "comm.limit_no_overlap": at(COMM, "limit_no_overlap", decimals=2),
    "comm.limit_overlap": at(COMM, "limit_overlap", decimals=2),
    "comm.ddp": at(COMM, "ddp_speedup", decimals=2),
    "comm.buckets": at(COMM, "ddp_buckets_speedup", decimals=2),
    # The seed's recipe (6 processes) and the same model at world 1, 5 seeds each (01, 04, 06)
    "headline.printed.accuracy": at(HEADLINE, "seed_printed", "test_accuracy", decimals=2),
    "headline.printed.loss1.min": at(HEADLINE, "seed_printed", "rank_losses", 0, decimals=2, then=min,
                                        says="min over the ranks"),
    "headline.printed.loss1.max": at(HEADLINE, "seed_printed", "rank_losses", 0, decimals=2, then=max,
                                        says="max over the ranks"),
    "headline.printed.loss2.min": at(HEADLINE, "seed_printed", "rank_losses", 1, decimals=2, then=min,
                                        says="min over the ranks"),
    "headline.printed.loss2.max": at(HEADLINE, "seed_printed", "rank_losses", 1, decimals=2, then=max,
                                        says="max over the ranks"),
    "headline.seed.min": at(HEADLINE, "summary", "seed", "test_accuracy_min", decimals=2),
    "headline.seed.max": at(HEADLINE, "summary", "seed", "test_accuracy_max", decimals=2),
    "headline.seed.mean": at(HEADLINE, "summary", "seed", "test_accuracy_mean", decimals=2),
    "headline.seed.loss1.min": at(HEADLINE, "summary", "seed", "rank_loss_range", 0, 0, decimals=2),
    "headline.seed.loss1.max": at(HEADLINE, "summary", "seed", "rank_loss_range", 0, 1, decimals=2),
    "headline.seed.loss2.min": at(HEADLINE, "summary", "seed", "rank_loss_range", 1, 0, decimals=2),
    "headline.seed.loss2.max": at(HEADLINE, "summary", "seed", "rank_loss_range", 1, 1, decimals=2),
    "headline.world1.min": at(HEADLINE, "summary", "world1", "test_accuracy_min", decimals=2),
    "headline.world1.max": at(HEADLINE, "summary", "world1", "test_accuracy_max", decimals=2),
    "headline.world1.mean": at(HEADLINE, "summary", "world1", "test_accuracy_mean", decimals=2),
    # The wait policy beside a busy process (06)
    "spin.idle": SPIN_IDLE,
    "spin.loaded": _contention(SPINNING, "package", "loaded"),
    "spin.loaded_over_idle": at(SPINNING, "contention", "ratios", "loaded_over_idle", decimals=2),
    "policy.idle": POLICY_IDLE,
    "policy.loaded": _contention(CONTENTION, "package", "loaded"),
    "policy.loaded_over_idle": at(CONTENTION, "contention", "ratios", "loaded_over_idle", decimals=2),
    "policy.idle_over_spin_idle": ratio(POLICY_IDLE, SPIN_IDLE, 2),
    "seed.loaded": _contention(CONTENTION, "seed", "loaded"),
    "policy.over_seed_loaded": at(CONTENTION, "contention", "ratios", "package_over_seed_loaded", decimals=1),
    # One H200: the tiny model's step, and a rank killed under NCCL (04, 06, the kit, troubleshooting)
    "h200.plain_ms": at(H200, "ddp_step", "plain_step_ms", decimals=2),
    "h200.ddp_ms": at(H200, "ddp_step", "ddp_step_ms", decimals=2),
    "h200.survivor_s": at(H200, "pair_kill", "survivor_seconds", decimals=1),
    # 08's proof: float32 rounding on the CPUs tried, and the float64 tolerance (08, the kit)
    "proof.float32_smallest": at(PRECISION, style="exp", then=_gaps("float32", min), says="smallest float32 gap"),
    "proof.float32_gap": at(PRECISION, style="exp", then=_gaps("float32", max), says="largest float32 gap"),
    "capstone.exact": Quote("ddp_tutorial.exercises.capstone.EXACT", _exact, style="exp"),
    # Code and catalogue
    "exercises.all": Quote("ddp_tutorial.exercises.EXERCISES", _all_exercises),
    "exercises.01_06": Quote("'=== exercise' blocks of notebooks/src/01…06", lambda: _exercises("01", "06")),
    "05.wait_minutes": in_code("notebooks/src/05_cluster_slurm.cells", r"slurm\.wait\(job_id, timeout=(\d+)",
                               then=lambda seconds: int(seconds) / 60),
    "stop.every": in_code("ddp_tutorial/**/*.py", r"^STOP_CHECK_EVERY = (\d+)"),
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
        lambda: at(PRECISION, then=_gaps("float64", max)).read() < number("capstone.exact")
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
