"""A module-level trainer in nanoGPT's layout, already made to run on a CPU too (issue 47 item 2): its
backend and device are defaults that a config file or the command line overrides (``exec`` of a
configurator, ``--backend=gloo --device=cpu``), and every GPU-only line is chosen by device
(``'cuda' in device``, ``device_type == 'cuda'``). ``ddp-tutorial check-script`` finds no line to change.
"""

import os

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

backend = 'nccl'  # 'nccl', 'gloo', etc.
device = 'cuda'  # examples: 'cpu', 'cuda', 'cuda:0'
exec(open(os.path.join(os.path.dirname(__file__), 'configurator_stub.py')).read())  # overrides from the command line
ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    device = f'cuda:{ddp_local_rank}' if torch.cuda.is_available() else 'cpu'
    if 'cuda' in device:
        torch.cuda.set_device(device)
device_type = 'cuda' if 'cuda' in device else 'cpu'  # for later use in torch.autocast
model = torch.nn.Linear(4, 2).to(device)
x = torch.zeros(3, 4)
if device_type == 'cuda':
    x = x.pin_memory().to(device, non_blocking=True)
else:
    x = x.to(device)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None)
print(model(x).sum().item())
if ddp:
    destroy_process_group()
