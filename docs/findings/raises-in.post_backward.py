"""FSDP2 + PEFT LoRA: eval; set_adapter [default,other]; forward; backward

Expected: backward puts gradients on {default,other} (LoRA weights); it got assertion_error.
Run: torchrun --nproc_per_node=1 raises-in.post_backward.py  (exit 1 at the assert while the bug is there, 0 once fixed)
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
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 6))])).to(torch.bfloat16)
model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False), autocast_adapter_dtype=True)
model.add_adapter('other', LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False), autocast_adapter_dtype=False)
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
with torch.no_grad():
    model(x)
model.base_model.set_adapter(['default', 'other'])
loss = model(x).float().sum()
try:
    loss.backward()
except Exception as e:
    raise AssertionError(f"expected backward to run and train ['default', 'other'], it raised {type(e).__name__}: {e}") from e
dist.destroy_process_group()
