"""FSDP2 + PEFT LoRA: train_step

Expected: train_step puts gradients on {default} (LoRA weights); it got assertion_error.
Run: torchrun --nproc_per_node=1 mixed-adapter-dtypes-in-one-group.py  (exit 1 at the assert while the bug is there, 0 once fixed)
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
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(10, 10)), ('lin2', nn.Linear(10, 2))])).to(torch.bfloat16)
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False, modules_to_save=['lin2']), autocast_adapter_dtype=True)
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
try:
    model.zero_grad(set_to_none=True)
    model(x).float().sum().backward()
    opt.step()
except Exception as e:
    raise AssertionError(f"expected train_step to run and train ['default'], it raised {type(e).__name__}: {e}") from e
dist.destroy_process_group()
