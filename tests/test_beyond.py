"""Notebook 09 ("where DDP stops"): its examples prove what its text claims, on real engines.

The functions are taken from the notebook's own source (``notebooks/src/09_beyond_ddp.cells``),
so a change there is tested here; they run on two real ipyparallel engines in a real gloo
process group, on other data than the notebook's (random images), with other sizes where a
size is a parameter. The stored outputs of both languages are checked too: every checked line
of a checked cell says ``True`` (or is a plain value), never ``False``.
"""

import re
import time
from pathlib import Path

import nbformat
import pytest
import torch

from ddp_tutorial import ipp
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.model import DeepNeuralNetwork
from notebook_modules import load  # noqa: E402 (tests/helpers: notebooks/*.py by path)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SOURCE = NOTEBOOKS / "src" / "09_beyond_ddp.cells"
EXAMPLES = ("accumulate", "uneven", "batch_statistics", "sharded_step", "mixed_precision")


def notebook_functions() -> dict:
    """The example functions exactly as notebook 09 defines them (English build)."""
    build = load("build")
    namespace: dict = {}
    for kind, content in build.parse(SOURCE):
        if not kind.startswith("code"):
            continue
        code = build.localize(content, "en")
        if code.startswith("def "):
            exec(compile(code.split("\n\n\n")[0], str(SOURCE), "exec"), namespace)
    missing = [name for name in EXAMPLES if name not in namespace]
    assert not missing, f"notebook 09 no longer defines {missing}"
    return namespace


@pytest.fixture(scope="module")
def examples():
    return notebook_functions()


@pytest.fixture(scope="module")
def batch():
    generator = torch.Generator().manual_seed(7)
    return torch.rand(96, 784, generator=generator), torch.randint(0, 10, (96,), generator=generator)


@pytest.fixture(scope="module")
def engines():
    ipp.stop(force=True)
    yield ipp.start(2)
    ipp.stop(force=True)


def one_process(images, labels, lr=None):
    torch.manual_seed(0)
    model = DeepNeuralNetwork(4, 784, 128, 10)
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    if lr is not None:
        torch.optim.SGD(model.parameters(), lr=lr).step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_no_sync_accumulation_equals_the_big_batch_and_needs_the_forward_in_the_block(examples, batch, engines):
    images, labels = batch
    (first0, grad0), (first1, grad1) = ipp.run(examples["accumulate"], images, labels, 3, n=2, keep=True)
    assert not torch.equal(first0, first1)            # no all-reduce inside no_sync
    assert torch.equal(grad0, grad1)                  # … one at the last micro-batch
    assert torch.allclose(grad0, one_process(images, labels), rtol=0, atol=1e-6)
    (wrong0, _), (wrong1, _) = ipp.run(examples["accumulate"], images, labels, 3, False, n=2, keep=True)
    assert torch.equal(wrong0, wrong1)                # forward outside the block: synchronised anyway


def test_join_lets_uneven_ranks_finish_with_identical_weights(examples, batch, engines):
    images, labels = batch
    (steps0, weights0), (steps1, weights1) = ipp.run(examples["uneven"], images, labels, n=2, keep=True)
    assert (steps0, steps1) == (3, 5)
    assert torch.equal(weights0, weights1)


def test_all_reduced_batch_statistics_are_those_of_the_whole_batch(examples, batch, engines):
    features = batch[0][:, 100:120]
    (local0, mean0, var0, on_cpu), (local1, mean1, var1, _) = ipp.run(
        examples["batch_statistics"], features, n=2, keep=True)
    assert not torch.allclose(local0, local1)
    assert torch.allclose(mean0, features.mean(0), atol=1e-5)
    assert torch.allclose(var0, features.var(0, unbiased=False), atol=1e-5)
    assert torch.equal(mean1, mean0) and torch.equal(var1, var0)
    # The notebook says SyncBatchNorm needs a GPU: if a torch release lifts that, the text must change.
    assert on_cpu is not None and "GPU" in on_cpu, on_cpu   # torch refuses CPU tensors (its own text)


def test_fully_shard_halves_the_stored_parameters_and_steps_like_one_process(examples, batch, engines):
    images, labels = batch
    (total, stored0, kind, weights0), (_, stored1, _, weights1) = ipp.run(
        examples["sharded_step"], images, labels, 0.05, n=2, keep=True)
    assert kind == "DTensor" and stored0 == stored1 and stored0 + stored1 == total
    assert torch.equal(weights0, weights1)
    assert torch.allclose(weights0, one_process(images, labels, lr=0.05), rtol=0, atol=1e-6)


def test_bfloat16_autocast_keeps_float32_weights_and_gradients(examples, batch, engines):
    images, labels = batch
    low0, low1 = ipp.run(examples["mixed_precision"], images, labels, n=2, keep=True)
    assert low0[True][:3] == ("torch.bfloat16", "torch.float32", "torch.float32")
    assert low0[False][:3] == ("torch.float32", "torch.float32", "torch.float32")
    g32, g16 = low0[False][3], low0[True][3]
    assert torch.equal(low1[True][3], g16)
    relative = ((g16 - g32).norm() / g32.norm()).item()
    assert 0 < relative < 0.05, relative


def test_uneven_inputs_without_join_end_in_a_clear_error_not_a_hang(batch, engines):
    """What the notebook's text says happens without Join: the rank with more batches is left
    alone in an all-reduce; the run ends with an error within the process group's timeout."""
    def uneven_without_join(env, images, labels):
        import torch
        from torch.nn.parallel import DistributedDataParallel
        from ddp_tutorial.model import DeepNeuralNetwork
        torch.manual_seed(0)
        model = DistributedDataParallel(DeepNeuralNetwork(4, 784, 128, 10))
        for k in range(3 + 2 * env.rank):
            x, y = images[k * 16:(k + 1) * 16], labels[k * 16:(k + 1) * 16]
            torch.nn.functional.cross_entropy(model(x), y).backward()
        return "finished"

    began = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        ipp.run(uneven_without_join, *batch, n=2, keep=True, pg_timeout=10.0, timeout=120.0)
    assert time.monotonic() - began < 120
    assert re.search(r"rank", str(caught.value), re.IGNORECASE), str(caught.value)


@pytest.mark.parametrize("lang", ["tr", "en"])
def test_stored_checks_all_say_true(lang):
    nb = nbformat.read(NOTEBOOKS / lang / "09_beyond_ddp.ipynb", as_version=4)
    checked = [c for c in nb.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source]
    assert len(checked) >= 5
    for cell in checked:
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert text.strip(), f"{lang}: a checked cell has no stored output"
        yes, no = {"tr": ("evet", "hayır"), "en": ("yes", "no")}[lang]   # i18n.yes_no
        answers = [line.rsplit(":", 1)[1].strip() for line in text.splitlines() if ":" in line]
        assert no not in answers, f"{lang}: a check failed in the stored output:\n{text}"
        assert answers.count(yes) >= 1, text
