"""Smoke tests of the benchmarks: the scripts run end to end on tiny data (no timing assertions:
benchmarks are not tests — see benchmarks/README.md for the measured figures)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from idx_files import write_mnist_like

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # benchmarks/ sits beside the package in the repository; it is not installed

from benchmarks.bound import step_sizes  # noqa: E402
from ddp_tutorial import figures, i18n  # noqa: E402


def bench(*args):
    env = dict(os.environ, PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="en")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "benchmarks.throughput", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_step_sizes_mirror_a_ddp_epoch():
    # World 1: 468 full batches and one of 96 (60 000 = 468 × 128 + 96).
    one = step_sizes(60000, 1, 128)
    assert len(one) == 469 and one[-1] == 96 and sum(one) == 60000
    # World 2: each rank has 30 000 samples → 235 steps of 2 × 128, the last 2 × 48.
    two = step_sizes(60000, 2, 128)
    assert len(two) == 235 and two[0] == 256 and two[-1] == 96 and sum(two) == 60000
    # World 7: the sampler pads 60 000 to 7 × 8572 = 60 004.
    seven = step_sizes(60000, 7, 128)
    assert sum(seven) == 60004 and len(seven) == 67


@pytest.mark.timeout(900)  # about 20 fresh interpreters (torch imports dominate); a minute on an idle 2-core machine
def test_table_and_scaling_on_tiny_data(tmp_path):
    root = write_mnist_like(tmp_path / "data", "mnist", n_train=1024, n_test=256, seed=0)
    out, figure = tmp_path / "bench.json", tmp_path / "scaling.png"
    done = bench("--mode", "all", "--dataset", "mnist", "--root", str(root), "--world", "1", "2",
                 "--repeats", "1", "--epochs", "1", "--threads", "1", "--max-epochs", "2",
                 "--target-accuracy", "60", "--comm-rounds", "2", "--json", str(out), "--figure", str(figure),
                 "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "package/seed" in done.stdout and "package/bound" in done.stdout

    report = json.loads(out.read_text())
    rows = report["table"]["rows"]
    assert set(rows) == {"1", "2"}
    for world, steps in (("1", 8), ("2", 4)):  # 1024 samples, 128 per process
        row = rows[world]
        for variant in ("seed", "package", "bound"):
            assert row[variant]["samples_per_second"] > 0, (world, variant)
            assert row[variant]["steps_per_epoch"] == steps, (world, variant)
            assert row[variant]["repeats"] == 1
            (run,) = report["table"]["runs"][variant][world]
            # Every pipeline saw the same data: 1024 samples in the epoch, at both world sizes.
            assert run["samples"] == 1024, (world, variant)
            assert run["samples_per_second"] == pytest.approx(run["samples"] / run["train_seconds"], rel=1e-3)
            assert run["wall_seconds"] >= run["train_seconds"]
        assert row["package_over_seed"] == pytest.approx(
            row["package"]["samples_per_second"] / row["seed"]["samples_per_second"])
        assert row["package_over_bound"] == pytest.approx(
            row["package"]["samples_per_second"] / row["bound"]["samples_per_second"])
    assert report["table"]["runs"]["package"]["2"][0]["backend"] == "gloo"
    assert set(report["goals"]) == {"package_over_seed", "package_over_bound", "world2_over_world1"}

    # Scaling: efficiency is relative to world 1, and the time-to-accuracy runs reached 60 %.
    assert report["scaling"]["1"]["efficiency"] == pytest.approx(1.0)
    curves = report["time_to_accuracy"]["curves"]
    assert [(c["world_size"], c["scale_lr"]) for c in curves] == [(1, False), (2, False), (2, True)]
    assert [c["lr"] for c in curves] == pytest.approx([1e-3, 1e-3, 2e-3])
    for c in curves:
        assert c["reached"] is not None, c
        assert c["reached"]["test_accuracy"] >= 60
        assert c["reached"]["steps"] == c["reached"]["epoch"] * (8 // c["world_size"])
    # The communication benchmark explains the speed-up: a DDP step costs more than its computation.
    (comm,) = report["communication"]
    assert comm["world_size"] == 2 and comm["gradient_bytes"] == 134_794 * 4
    assert comm["ddp"] > comm["allreduce"] > 0 and comm["compute"] > 0
    assert comm["ddp_buckets"] > 0 and comm["ddp_view"] > 0  # the overlap experiments ran
    assert comm["limit_overlap"] >= comm["limit_no_overlap"] > 0
    assert "Communication at world size 2" in done.stdout
    # World 2 against the limits gloo's all-reduce implies, as ratios to the measured world 1.
    limits = report["limits"]["2"]
    assert limits["overlap"] >= limits["no_overlap"] > 0
    assert limits["measured"] == pytest.approx(
        report["scaling"]["2"]["samples_per_second"] / report["scaling"]["1"]["samples_per_second"])
    assert "World 2 / world 1: measured" in done.stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000


def test_unstaged_data_is_a_clear_error_in_turkish(tmp_path, monkeypatch, capsys):
    # The command's main() in this process (what `python -m benchmarks.throughput` calls; the table test
    # above starts that entry point fresh): the error comes before any child is started, so a fresh
    # interpreter would only add a torch import. A traceback here would be an exception out of main().
    from benchmarks import throughput

    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    code = throughput.main(["--dataset", "fashion-mnist", "--root", str(tmp_path / "empty"), "--repeats", "1",
                            "--json", str(tmp_path / "x.json")])
    stderr = capsys.readouterr().err
    assert code == 2
    assert "hata:" in stderr and "ddp-tutorial data prepare" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "x.json").exists()


# --------------------------------------------------------------------------------------
# The recorded scaling figure, and the notebooks that show it (issue #5: "used by notebook 04/06")

NOTEBOOK_SOURCES = REPO / "notebooks" / "src"


def _code_cells(prefix):
    """The code cells of ``notebooks/src/<prefix>_*.cells`` (the same code in both languages)."""
    (source,) = NOTEBOOK_SOURCES.glob(f"{prefix}_*.cells")
    blocks = source.read_text(encoding="utf-8").split("\n=== ")
    return [block.split("\n", 1)[1] for block in blocks if block.startswith("code")]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_plot_results_draws_the_recorded_json(lang, tmp_path):
    report = figures.load_results()  # default: the recorded run of benchmarks/README.md, package data
    assert figures.RECORDED.is_file() and figures.RECORDED.parent == REPO / "ddp_tutorial" / "results"
    fig = figures.plot_results(lang=lang)
    assert fig.canvas.manager is None  # not a pyplot figure: no backend switched, nothing left open
    left, right = fig.axes
    assert left.get_title() == i18n.t("plot.title_throughput", lang=lang)
    assert right.get_title() == i18n.t("plot.title_accuracy", lang=lang)
    measured = [line for line in left.get_lines() if line.get_label() == i18n.t("plot.measured", lang=lang)]
    assert list(measured[0].get_ydata()) == pytest.approx(
        [row["samples_per_second"] for row in report["scaling"].values()])
    curves = report["time_to_accuracy"]["curves"]
    labels = [line.get_label() for line in right.get_lines()]  # one curve per setting, and the target line
    assert labels == [i18n.t("plot.curve", lang=lang, world=c["world_size"], lr=c["lr"]) for c in curves] + [
        i18n.t("plot.target", lang=lang, target=report["time_to_accuracy"]["target"])]
    out = tmp_path / "figure.png"
    fig.savefig(out, dpi=50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # save_figure (what --figure uses) writes the same figure to a file, its folder created.
    again = tmp_path / "sub" / "again.png"
    figures.save_figure(again, figures.scaling_figure(report["time_to_accuracy"]["target"], report["scaling"],
                                                      curves, lang))
    assert again.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_results_refuses_a_report_without_scaling(tmp_path):
    table_only = tmp_path / "table.json"
    table_only.write_text(json.dumps({"table": {}}))
    with pytest.raises(ValueError, match="no scaling results"):
        figures.plot_results(table_only)


@pytest.mark.parametrize("prefix", ["04", "06"])
def test_notebook_shows_the_benchmarks_recorded_figure(prefix):
    """Notebooks 04 and 06 draw the benchmark's own figure from the recorded JSON, not only a live plot."""
    import nbformat

    cells = [c for c in _code_cells(prefix) if "figures.plot_results(" in c]
    assert cells, f"notebook {prefix} no longer draws ddp_tutorial.figures.plot_results"
    (cell,) = cells
    assert "from ddp_tutorial import figures" in cell
    assert "sys.path" not in cell and "benchmarks" not in cell  # the installed package, no path patching
    # …and the stored notebooks show the figure (a PNG in that cell's output) in both languages.
    import importlib.util
    spec = importlib.util.spec_from_file_location("notebook_build", REPO / "notebooks" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for lang in ("en", "tr"):
        (path,) = (REPO / "notebooks" / lang).glob(f"{prefix}_*.ipynb")
        wanted = build.localize(cell.strip("\n"), lang)  # comments and text in the notebook's language
        stored = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and c.source == wanted]
        assert stored and any("image/png" in o.get("data", {}) for o in stored[0].outputs), \
            f"{lang}/{path.name}: no recorded figure in the stored outputs; run notebooks/build.py --execute {prefix}"


# --------------------------------------------------------------------------------------
# The seed's headline (issue 27): benchmarks/seed_headline.py, its code path on a tiny subset


@pytest.mark.timeout(600)  # three fresh process trees (2 × 3, 2 × 3, 1): about a minute on an idle 2-core machine
def test_seed_headline_runs_the_seeds_recipe_on_a_tiny_subset(tmp_path, monkeypatch, capsys):
    from benchmarks.seed_headline import SEED_PRINTED, main as headline_main, node_commands, parse

    # The recipe, command by command: one per-node parent per "node", as the seed starts it (srun -N 2 -n 2).
    options = parse(["--root", str(tmp_path)])
    nodes = node_commands("seed", options, 7, tmp_path / "r.json")
    assert [c[c.index("--node-rank") + 1] for c in nodes] == ["0", "1"]
    for command in nodes:
        for flag, value in (("--nnodes", "2"), ("--nproc-per-node", "3"), ("--batch-size", "128"), ("--lr", "0.001"),
                            ("--epochs", "2"), ("--seed", "7"), ("--dataset", "mnist"), ("--scale-lr", "none")):
            assert command[command.index(flag) + 1] == value, (flag, command)
    assert "--json" in nodes[0] and "--json" not in nodes[1]  # global rank 0 lives on node 0
    sqrt = node_commands("sqrt", options, 0, tmp_path / "r.json")
    assert [c[c.index("--scale-lr") + 1] for c in sqrt] == ["sqrt"] * 2
    (single,) = node_commands("world1", options, 0, tmp_path / "r.json")
    assert single[single.index("--nproc-per-node") + 1] == "1"

    root = write_mnist_like(tmp_path / "data", "mnist", n_train=1536, n_test=256, seed=0)
    out, figure = tmp_path / "headline.json", tmp_path / "headline.png"
    env = dict(os.environ, PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="en", TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "benchmarks.seed_headline", "--root", str(root), "--seeds", "0",
                           "--configs", "seed", "sqrt", "world1", "--epochs", "2", "--train-subset", "1536",
                           "--json", str(out), "--figure", str(figure)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["seed_printed"] == SEED_PRINTED and report["seed_printed"]["test_accuracy"] == 92.79
    runs = {r["config"]: r for r in report["runs"]}
    assert set(runs) == {"seed", "sqrt", "world1"}
    assert (runs["seed"]["world_size"], runs["seed"]["nodes"], runs["seed"]["launcher"]) == (6, 2, "spawn")
    assert runs["world1"]["world_size"] == 1
    assert [runs[c]["lr"] for c in ("seed", "sqrt", "world1")] == pytest.approx([1e-3, 6 ** 0.5 * 1e-3, 1e-3])
    # 1536 images: 256 per rank at world 6, 2 steps of 128; 12 steps at world 1. Every rank's loss sum, each epoch.
    assert runs["seed"]["steps_per_epoch"] == 2 and runs["world1"]["steps_per_epoch"] == 12
    assert [len(epoch) for epoch in runs["seed"]["rank_losses"]] == [6, 6]
    assert all(0 <= r["test_accuracy"] <= 100 for r in runs.values())
    summary = report["summary"]["seed"]
    assert summary["test_accuracy"] == [runs["seed"]["test_accuracy"]] and summary["seeds"] == [0]
    assert "the seed's recipe" in done.stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The figure again from the recorded JSON, in Turkish, without training: the command's main() in this
    # process (the run above started the same entry point fresh; a redraw starts no child).
    again = tmp_path / "headline-tr.png"
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    assert headline_main(["--redraw", str(out), "--figure", str(again)]) == 0
    redrawn = capsys.readouterr().out
    assert "kaynak öğreticinin tarifi" in redrawn, redrawn
    assert again.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
