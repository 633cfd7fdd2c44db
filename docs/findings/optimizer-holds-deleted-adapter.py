"""FSDP2 + PEFT LoRA: delete_adapter default; save_optimizer

Expected: save_optimizer runs without an exception.
Run: torchrun --nproc_per_node=1 optimizer-holds-deleted-adapter.py  (exit 1 at the assert while the bug is there, 0 once fixed)

accelerate: get_optimizer_state_dict is the call accelerate's save_fsdp_optimizer makes under FSDP2. A training script doing the same under `accelerate launch --use_fsdp --fsdp_version 2 train.py` on GPUs takes this path (not run on GPU here).
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 8))]))
model = get_peft_model(net, LoraConfig(r=3, lora_alpha=6, target_modules=['lin0'], init_lora_weights=False))
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
model.delete_adapter('default')
try:
    ckpt = get_optimizer_state_dict(model, opt)
except Exception as e:
    raise AssertionError(f"expected save_optimizer to run, it raised {type(e).__name__}: {e}") from e
dist.destroy_process_group()
