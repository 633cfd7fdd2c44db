"""FSDP2 + PEFT LoRA: add_adapter late; set_adapter late; new_optimizer; train_step

Expected: every rank holds the same state and issues the same collectives.
Run: torchrun --nproc_per_node=2 late-adapter-not-managed-by-fsdp.py  (exit 1 at the assert while the bug is there, 0 once fixed)
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
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 8))]))
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1 + 1000003 * rank))
model.add_adapter('late', LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
model.set_adapter('late')
opt = torch.optim.AdamW([shards.get(n, p) for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
every = [None] * dist.get_world_size()
dist.all_gather_object(every, model.base_model.model.lin0.lora_A['late'].weight.detach())
diff = max((v - every[0]).abs().max().item() for v in every)
assert diff == 0, f"expected every rank to hold the same lin0.lora_A.late, got a difference of {diff:.3g} between ranks"
dist.barrier()  # every rank is done with its collectives before any tears down
dist.destroy_process_group()
