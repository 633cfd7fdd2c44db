"""FSDP2 + PEFT LoRA: train_step; eval; step; delta_weight lin0

Expected: get_delta_weight returns B @ A * scaling of the weights the optimizer steps.
Run: torchrun --nproc_per_node=1 delta-weight-from-stale-copy.py  (exit 1 at the assert while the bug is there, 0 once fixed)

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
from torch.distributed.tensor import DTensor

def full(t):  # the whole tensor on every rank
    return t.full_tensor() if isinstance(t, DTensor) else t


dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(20, 2))]))
model = get_peft_model(net, LoraConfig(r=3, lora_alpha=3, target_modules=['lin0'], init_lora_weights=False))
fully_shard(model, mesh=mesh, reshard_after_forward=False)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 20, generator=torch.Generator().manual_seed(1))
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
with torch.no_grad():
    model(x)
opt.step()
layer = model.base_model.model.lin0
deltas = {a: layer.get_delta_weight(a) for a in model.base_model.active_adapters if a in layer.lora_A}
want = {a: full(shards[f'base_model.model.lin0.lora_B.{a}.weight']) @ full(shards[f'base_model.model.lin0.lora_A.{a}.weight']) * layer.scaling[a] for a in deltas}
bad = [a for a in deltas if not torch.allclose(full(deltas[a]), want[a], atol=1e-5)]
assert not bad, f"expected get_delta_weight(a) == B @ A * scaling of the weights the optimizer steps, got a different delta for {bad}"
dist.destroy_process_group()
