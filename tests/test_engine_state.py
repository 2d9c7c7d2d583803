"""The engines kept between exercise checks carry nothing of one attempt into the next (issue 36: E01,
E03, E05). Real ipyparallel engines, started once for the module (tests/conftest.py: two_engines)."""

from __future__ import annotations

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial.exercises.core import CORRECT, WRONG
from notebook_cells import cell

pytestmark = pytest.mark.slow  # two engines start (≈10–20 s on a loaded 2-core machine)


@pytest.fixture(scope="module")
def engines(two_engines):
    """The module's two kept engines."""


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")


def solution(exercise):
    namespace = {}
    exec(exercise.solution_code("en"), namespace)
    return namespace[exercise.name]


def test_grad_mode_switched_off_by_an_attempt_is_graded_and_put_back(engines):
    """E01: `torch.set_grad_enabled(False)` in evaluate_rank0 was graded correct and left autograd off on
    rank 0: the next check of a correct train_ddp_steps blamed the attendee's `loss.backward()`."""
    attempt = cell('''
        def evaluate_rank0(ddp_model, images, labels, rank):
            import torch
            if rank != 0:
                return None
            torch.set_grad_enabled(False)
            predictions = ddp_model.module(images).argmax(dim=1)
            return (predictions == labels).float().mean().item() * 100
    ''', "evaluate_rank0")
    outcome = ex.evaluate_rank0.evaluate(attempt)
    assert outcome.status == WRONG and outcome.key == "ex.evaluate_rank0.grad_left_off", outcome.text
    assert "torch.no_grad()" in outcome.text
    outcome = ex.train_ddp_steps.evaluate(solution(ex.train_ddp_steps))
    assert outcome.status == CORRECT, outcome.text


def test_a_torch_function_put_in_place_of_another_is_put_back(engines):
    """E03: `dist.all_reduce = dist.broadcast` (itself a torch function) was never put back: the shipped
    solution was then graded "broadcast() got an unexpected keyword argument 'op'"."""
    attempt = cell('''
        def mean_over_ranks(tensor):
            import torch.distributed as dist
            dist.all_reduce = dist.broadcast
            dist.all_reduce(tensor, 0)
            return tensor
    ''', "mean_over_ranks")
    outcome = ex.mean_over_ranks.evaluate(attempt)
    assert outcome.status == WRONG and outcome.key == "ex.torch_replaced", outcome.text
    assert "torch.distributed.all_reduce" in outcome.text
    outcome = ex.mean_over_ranks.evaluate(solution(ex.mean_over_ranks))
    assert outcome.status == CORRECT, outcome.text


def test_the_engines_working_directory_is_put_back(engines, tmp_path):
    """E05: `os.chdir('/')` in an attempt left the engines in `/` (a later ipp.train with relative paths
    wrote there)."""
    from ddp_tutorial import ipp
    attempt = cell('''
        def mean_over_ranks(tensor):
            import os
            import torch.distributed as dist
            os.chdir("/")
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            return tensor / dist.get_world_size()
    ''', "mean_over_ranks")
    import os
    kept = ipp.current()
    before = kept.client[kept.ids].apply_sync(os.getcwd)
    assert ex.mean_over_ranks.evaluate(attempt).status == CORRECT
    assert kept.client[kept.ids].apply_sync(os.getcwd) == before != ["/", "/"]


def test_a_collective_called_on_one_rank_only_names_the_ranks_that_never_came(engines):
    """E07: an all_reduce on rank 0 only ended, after the timeout, in gloo's own text at rank 0's line
    (`pair.cc:561 C…`); now the ranks that returned without calling it are named."""
    attempt = cell('''
        def mean_over_ranks(tensor):
            import torch.distributed as dist
            if dist.get_rank() == 0:
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            return tensor / dist.get_world_size()
    ''', "mean_over_ranks")
    outcome = ex.mean_over_ranks.evaluate(attempt)
    assert outcome.status == WRONG and "Rank(s) 1 returned without calling this collective" in outcome.text, \
        outcome.text
    assert ex.mean_over_ranks.evaluate(solution(ex.mean_over_ranks)).status == CORRECT
