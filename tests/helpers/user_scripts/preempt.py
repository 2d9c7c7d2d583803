"""A user's own DDP script that follows slurm/README.md's preemption contract word for word
(it imports nothing from ddp_tutorial): SIGUSR1 → its own checkpoint → exit 75 → requeue → resume.

    python preempt.py CHECKPOINT RESULT.json [EPOCHS]
"""

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

# ---- the pattern from slurm/README.md ("The preemption contract") -------------------------
stop = False
def on_usr1(signum, frame):                  # only note it: stop at the next safe point  # noqa: E302
    global stop
    stop = True
signal.signal(signal.SIGUSR1, on_usr1)
# -------------------------------------------------------------------------------------------

CKPT, RESULT = sys.argv[1], sys.argv[2]
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 6
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_one_epoch(epoch: int) -> None:
    g = torch.Generator().manual_seed(epoch * 100 + dist.get_rank())
    x = torch.randn(16, 4, generator=g)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    for p in model.parameters():  # average the gradients by hand (no DDP needed for the contract)
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
    time.sleep(0.5)
    if dist.get_rank() == 0:
        print(f"epoch {epoch}", flush=True)


start = 0
if os.path.exists(CKPT):                     # a requeued run: continue where it stopped
    state = torch.load(CKPT, map_location="cpu")
    model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])  # noqa: E702
    start = state["epoch"]
for epoch in range(start, epochs):
    train_one_epoch(epoch)
    flag = torch.tensor([float(stop)]); dist.all_reduce(flag)  # every rank agrees to stop  # noqa: E702
    if flag.item() > 0:
        if dist.get_rank() == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, CKPT + ".tmp"); os.replace(CKPT + ".tmp", CKPT)  # noqa: E702
        dist.barrier(); dist.destroy_process_group()  # noqa: E702
        sys.stdout.flush(); os._exit(75)     # 75: requeue me (os._exit: no teardown abort)  # noqa: E702

if dist.get_rank() == 0:
    with open(RESULT + ".tmp", "w") as f:
        json.dump({"started_at": start, "epochs": epochs, "restart": os.environ.get("SLURM_RESTART_COUNT"),
                   "weights": [p.detach().flatten().tolist() for p in model.parameters()]}, f)
    os.replace(RESULT + ".tmp", RESULT)
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # as slurm/README.md says: no teardown abort after a finished run
