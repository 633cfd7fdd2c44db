"""FSDP2 + PEFT LoRA: disable_enter; eval; disable_exit; train_step

Expected: requires_grad set on the unsharded parameters reaches the shards the optimizer steps.
Run: torchrun --nproc_per_node=1 flag-on-copy.disable_adapter-exit.py  (exit 1 at the assert while the bug is there, 0 once fixed)

accelerate: the root's reshard_after_forward=False is what accelerate's fsdp2_prepare_model gives it (it leaves the root's to torch, which resolves it to False). A training script doing the same under `accelerate launch --use_fsdp --fsdp_version 2 train.py` on GPUs takes this path (not run on GPU here).
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(4, 2))]))
model = get_peft_model(net, LoraConfig(r=3, lora_alpha=6, target_modules=['lin0'], init_lora_weights=False))
fully_shard(model, mesh=mesh, reshard_after_forward=False)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
ctx = model.disable_adapter()
ctx.__enter__()
with torch.no_grad():
    model(x)
ctx.__exit__(None, None, None)
flags = {n: p.requires_grad for n, p in model.named_parameters() if '.lora_' in n}
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
lost = {n: (flags[n], shards[n].requires_grad) for n in flags if n in shards and shards[n].requires_grad != flags[n]}
assert not lost, f"expected the shards to keep the requires_grad set before train_step (before, after): {lost}"
dist.destroy_process_group()
