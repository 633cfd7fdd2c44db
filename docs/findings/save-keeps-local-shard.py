"""FSDP2 + PEFT LoRA: save_adapters

Expected: what is saved holds every selected adapter's whole tensors, and loads back.
Run: torchrun --nproc_per_node=2 save-keeps-local-shard.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(10, 20))]))
model = get_peft_model(net, LoraConfig(r=8, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
saved = {a: get_peft_model_state_dict(model, adapter_name=a) for a in model.peft_config}
partial = {k: f'{v.to_local().shape[0]} of {v.shape[0]} rows' for sd in saved.values() for k, v in sd.items() if isinstance(v, DTensor)}
assert not partial, f"expected get_peft_model_state_dict to return whole tensors (what save_pretrained writes), got this rank's shard of {partial}"
dist.barrier()  # every rank is done with its collectives before any tears down
dist.destroy_process_group()
