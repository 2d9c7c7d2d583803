"""The notebooks' checked exercises, three ways, in both languages: the shipped placeholder says
"not done" and raises nothing; a typical wrong answer gets its specific message; the solution
passes. The distributed ones run on two real ipyparallel engines inside a gloo process group
(started once for this module). Attendee code is compiled from source text, as a notebook cell
is, so it travels to the engines by value and its lines are in the line cache.
"""

from __future__ import annotations

import linecache
import textwrap

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial import ipp
from ddp_tutorial.exercises.core import CORRECT, NOT_DONE, WRONG

pytestmark = pytest.mark.exercises

_cells = 0


def cell(source: str, name: str):
    """``name`` as defined by a notebook cell with ``source`` (in ``__main__``, source in linecache)."""
    global _cells
    _cells += 1
    source = textwrap.dedent(source).strip() + "\n"
    filename = f"/tmp/ipykernel_test/cell{_cells}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def solution(exercise):
    return cell(exercise.code, exercise.name)


@pytest.fixture(scope="module")
def engines():
    ipp.stop(force=True)
    ipp.start(2)
    yield
    ipp.stop(force=True)


@pytest.fixture(params=["en", "tr"])
def lang(request, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", request.param)
    return request.param


def placeholder(exercise):
    if exercise.name == "fixed_sbatch":
        return ex.SEED_SBATCH
    return cell(f'''
        def {exercise.name}(*args):
            """The shipped placeholder."""
            ...  # YOUR CODE HERE
    ''', exercise.name)


def test_at_least_twelve_exercises_over_notebooks_01_to_06():
    assert len(ex.EXERCISES) >= 12
    assert {e.notebook for e in ex.EXERCISES} == {"01", "02", "03", "04", "05", "06"}
    assert len({e.name for e in ex.EXERCISES}) == len(ex.EXERCISES)


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.name)
def test_placeholder_is_not_done_and_raises_nothing(exercise, lang, capsys):
    outcome = exercise.evaluate(placeholder(exercise))
    assert outcome.status == NOT_DONE
    assert ("not done yet" if lang == "en" else "henüz yapılmadı") in outcome.text
    exercise.check(None)  # the value left at None: also "not done", printed
    assert exercise.name in capsys.readouterr().out


def test_check_finds_the_answer_in_the_callers_namespace(capsys):
    global steps_per_epoch

    def steps_per_epoch(num_samples, world_size, batch_size):  # noqa: F811 - the attendee's definition
        return num_samples // world_size // batch_size

    ex.steps_per_epoch.check()
    assert "469" in capsys.readouterr().out
    del steps_per_epoch


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.name)
def test_hints_have_two_levels_and_solution_shows_code(exercise, lang, capsys):
    exercise._hints_shown = 0
    exercise.hint()
    exercise.hint()
    first, second = capsys.readouterr().out.strip().split("\n")
    assert first.startswith("Hint 1:" if lang == "en" else "İpucu 1:") and first != second
    assert second.startswith("Hint 2:" if lang == "en" else "İpucu 2:")
    exercise.solution()
    shown = capsys.readouterr().out
    assert shown.startswith("Solution:" if lang == "en" else "Çözüm:") and exercise.code.strip() in shown


# Typical wrong answers: (source defining the name, the message in English, in Turkish)
WRONG_ANSWERS = {
    "global_rank": ("def global_rank(node_rank, local_rank, gpus_per_node):\n    return node_rank + local_rank",
                    "your function gives 1, but the seed's formula gives 3",
                    "fonksiyonunuz 1 veriyor, kaynak öğreticinin formülü ise 3"),
    "mlp_parameters": ("def mlp_parameters(num_layers, input_features, hidden, classes):\n"
                       "    return input_features * hidden + (num_layers - 2) * hidden * hidden + hidden * classes",
                       "you gave 65: that counts the weights only; the model has 73",
                       "65 verdiniz: bu yalnızca ağırlıkları sayar; modelin 73"),
    "shard_indices": ("def shard_indices(num_samples, world_size, rank, seed, epoch):\n    import torch\n"
                      "    g = torch.Generator(); g.manual_seed(seed + epoch)\n"
                      "    return torch.randperm(num_samples, generator=g).tolist()[rank::world_size]",
                      "Rank 1 of 3 with 10 samples (seed 0, epoch 0) got 3 indices",
                      "Listeyi dünya boyutunun katına tamamladınız mı"),
    "steps_per_epoch": ("def steps_per_epoch(num_samples, world_size, batch_size):\n"
                        "    return num_samples // world_size // batch_size",
                        "you gave 468, but the training loop makes 469",
                        "468 verdiniz, ama eğitim döngüsü epoch başına 469"),
    "epoch_orders": ("def epoch_orders(sampler, epochs):\n    return [list(iter(sampler)) for epoch in range(epochs)]",
                     "Epoch 1 repeats epoch 0's order", "Epoch 1, epoch 0'ın sırasını tekrarlıyor"),
    "mean_over_ranks": ("def mean_over_ranks(tensor):\n    import torch.distributed as dist\n"
                        "    dist.all_reduce(tensor)\n    return tensor",
                        "Rank 0 returned [4.5, 2.0, -2.0]: that is the sum over the 2 ranks",
                        "Rank 0 [4.5, 2.0, -2.0] döndürdü: bu 2 rank üzerindeki toplam"),
    "average_gradients": ("def average_gradients(model):\n    import torch.distributed as dist\n"
                          "    for p in model.parameters():\n        dist.all_reduce(p.grad)",
                          "you summed them but did not divide by the world size",
                          "topladınız ama dünya boyutuna bölmediniz"),
    "train_ddp_steps": ("def train_ddp_steps(model, batches, lr):\n    import torch\n"
                        "    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
                        "    for images, labels in batches:\n        optimizer.zero_grad()\n"
                        "        torch.nn.functional.cross_entropy(model(images), labels).backward()\n"
                        "        optimizer.step()\n    return model",
                        "Your weights differ between ranks after step 1",
                        "Ağırlıklarınız 1. adımdan sonra rank'ler arasında farklı"),
    "evaluate_rank0": ("def evaluate_rank0(ddp_model, images, labels, rank):\n    import torch\n"
                       "    if rank != 0:\n        return None\n    with torch.no_grad():\n"
                       "        return (ddp_model(images).argmax(1) == labels).float().mean().item() * 100",
                       "you called the DDP wrapper itself", "doğrudan DDP sarmalayıcısını çağırdınız"),
    "fixed_sbatch": ("from ddp_tutorial.exercises import SEED_SBATCH\n"
                     "fixed_sbatch = SEED_SBATCH.replace('#SBACTH', '#SBATCH').replace('01_distributed.p\\n', "
                     "'01_distributed.py\\n')",
                     "MASTER_PORT=12900 is one fixed port", "MASTER_PORT=12900 tek, sabit bir port"),
    "master_addr": ("def master_addr(nodelist):\n    return nodelist.split(',')[0]",
                    "you gave 'gpu[01-03', but the first host (where rank 0 runs) is 'gpu01'",
                    "'gpu[01-03' verdiniz, ama ilk düğüm (rank 0'ın çalıştığı yer) 'gpu01'"),
    "dead_rank": ("def dead_rank(log):\n    import re\n"
                  "    return int(re.search(r'\\brank\\s*:\\s*(\\d+)', log).group(1))",
                  "you named rank 2, but it only failed after its peer was gone; rank 3 died first",
                  "rank 2 dediniz, ama o ancak eşi gittikten sonra hata verdi; ilk ölen rank 3"),
    "lr_for": ("def lr_for(base_lr, world_size, optimizer):\n    return base_lr * world_size",
               "you gave 0.006 = lr × 6: that is SGD's linear rule",
               "0,006 = lr × 6 verdiniz: bu SGD'nin doğrusal kuralı"),
}


def test_every_exercise_has_a_wrong_answer_test():
    assert set(WRONG_ANSWERS) == set(ex.BY_NAME)


def _needs_engines(exercise, request):
    if exercise.distributed:
        request.getfixturevalue("engines")


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.name)
def test_typical_wrong_answer_gets_its_message(exercise, lang, request):
    _needs_engines(exercise, request)
    source, english, turkish = WRONG_ANSWERS[exercise.name]
    outcome = exercise.evaluate(cell(source, exercise.name))
    assert outcome.status == WRONG, outcome.text
    assert (english if lang == "en" else turkish) in outcome.text
    assert "Traceback" not in outcome.text


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.name)
def test_solution_passes(exercise, request):
    _needs_engines(exercise, request)
    outcome = exercise.evaluate(solution(exercise))
    assert outcome.status == CORRECT, outcome.text
    assert "correct!" in outcome.text


def test_error_in_attendee_code_shows_their_line_not_a_traceback(lang):
    answer = cell('''
        def steps_per_epoch(num_samples, world_size, batch_size):
            per_rank = num_samples / (world_size - world_size)
            return per_rank
    ''', "steps_per_epoch")
    outcome = ex.steps_per_epoch.evaluate(answer)
    assert outcome.status == WRONG
    assert "`per_rank = num_samples / (world_size - world_size)` → ZeroDivisionError: division by zero" in outcome.text
    assert ("line 2" if lang == "en" else "2. satırda") in outcome.text
    assert "Traceback" not in outcome.text and "site-packages" not in outcome.text


def test_error_on_an_engine_names_the_rank_and_the_line(engines):
    answer = cell('''
        def mean_over_ranks(tensor):
            import torch.distributed as dist
            dist.all_reduce(tensor)
            return tensor / undefined_world_size
    ''', "mean_over_ranks")
    outcome = ex.mean_over_ranks.evaluate(answer)
    assert outcome.status == WRONG
    assert "On rank 0: Your code raised an error at line 4: `return tensor / undefined_world_size`" in outcome.text
    assert "NameError" in outcome.text and "Traceback" not in outcome.text


def test_not_implemented_error_counts_as_not_done():
    answer = cell('''
        def master_addr(nodelist):
            # YOUR CODE HERE
            raise NotImplementedError()
    ''', "master_addr")
    assert ex.master_addr.evaluate(answer).status == NOT_DONE
