"""The proof that DDP averages gradients: N ranks × batch B ≡ one process × batch N·B.

Each rank takes its own B samples, computes its gradient and, during ``backward()``, DDP
all-reduces (averages) the gradients of all ranks. The average of N per-rank mean losses over
B samples is the mean loss over the N·B samples together, so after every step the weights must
equal those of one process that saw the N·B samples as one batch. Real processes, real gloo.
"""

import torch
from torch.nn.parallel import DistributedDataParallel

from ddp_tutorial.ipp.remote import join
from ddp_tutorial.whoami import find_free_port, resolve_environment
from ddp_tutorial.model import DeepNeuralNetwork
from ddp_tutorial.sampling import epoch_indices, make_sampler
from ddp_tutorial.supervisor import run_processes

N, B, STEPS, SAMPLES = 3, 8, 5, 3 * 8 * 5
# Everything in float64 (as 08's proof, capstone.EXACT): the two sides add the same numbers in a
# different order, so in float32 their gap is rounding that depends on the CPU's vector code path
# (ATEN_CPU_CAPABILITY) and on the thread count — measured 4.5e-8…6e-8 here, and Adam can amplify
# a near-zero gradient's rounding to a full step. In float64 that rounding is ~1e-16, so a tight
# tolerance tests DDP's averaging, not the CPU.
EXACT = 1e-12


def fixed_data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(SAMPLES, 20, generator=g, dtype=torch.float64), torch.randint(0, 4, (SAMPLES,), generator=g)


def new_model():
    torch.manual_seed(0)
    return DeepNeuralNetwork(4, 20, 16, 4).double()


def train_steps(model, optimizer, x, y, batches):
    loss_fn = torch.nn.CrossEntropyLoss()
    for idx in batches:
        optimizer.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        optimizer.step()


def ddp_worker(rank, port, out_path):
    torch.set_num_threads(1)
    env = resolve_environment(rank=rank, world_size=N, master_addr="127.0.0.1", master_port=port)
    join(env, "gloo", 60)
    x, y = fixed_data()
    model = DistributedDataParallel(new_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    # The sampler without shuffling gives rank r the samples r, r+N, r+2N, …: batch j of all
    # ranks together is exactly the samples j·N·B … (j+1)·N·B − 1.
    mine = torch.split(epoch_indices(make_sampler(SAMPLES, N, rank, 0, shuffle=False), 0), B)
    train_steps(model, optimizer, x, y, mine)
    if rank == 0:
        torch.save(model.module.state_dict(), out_path)
    torch.distributed.destroy_process_group()


def test_n_ranks_times_b_equals_one_process_times_n_b(tmp_path):
    out = tmp_path / "ddp.pt"
    assert run_processes(N, ddp_worker, (find_free_port(), str(out))) == 0
    ddp_weights = torch.load(out)

    x, y = fixed_data()
    single = new_model()
    optimizer = torch.optim.Adam(single.parameters(), lr=1e-2)
    together = torch.split(epoch_indices(make_sampler(SAMPLES, 1, 0, 0, shuffle=False), 0), N * B)
    assert len(together) == STEPS
    train_steps(single, optimizer, x, y, together)

    start = new_model().state_dict()
    for name, value in single.state_dict().items():
        assert not torch.allclose(value, start[name]), "the weights must have moved"
        assert torch.allclose(ddp_weights[name], value, atol=EXACT, rtol=0), name


def test_without_averaging_the_ranks_would_drift_apart():
    """The same steps without DDP (each rank on its own B samples) end elsewhere: the check above can fail."""
    x, y = fixed_data()
    single = new_model()
    optimizer = torch.optim.Adam(single.parameters(), lr=1e-2)
    in_order = epoch_indices(make_sampler(SAMPLES, N, 0, 0, shuffle=False), 0)
    train_steps(single, optimizer, x, y, torch.split(in_order, B))
    reference = new_model()
    opt2 = torch.optim.Adam(reference.parameters(), lr=1e-2)
    train_steps(reference, opt2, x, y, torch.split(torch.arange(SAMPLES), N * B))
    differs = any(not torch.allclose(a, b, atol=1e-5) for a, b in
                  zip(single.state_dict().values(), reference.state_dict().values()))
    assert differs
