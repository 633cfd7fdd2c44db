"""FSDP2 + PEFT LoRA: eval; set_adapter other; train_step; train_step

Expected: train_step puts gradients on {other} (LoRA weights); it got {}.
Run: torchrun --nproc_per_node=1 reduce-dtype-unset-after-frozen-forward.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 6)), ('lin1', nn.Linear(6, 4))]))
model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=['lin1'], init_lora_weights=False))
model.add_adapter('other', LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False))
fully_shard(model.base_model.model.lin0, mesh=mesh, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
fully_shard(model, mesh=mesh, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    model(x)
model.set_adapter('other')
try:
    opt.zero_grad(set_to_none=True)
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()
except Exception as e:  # it raises here too: the sequence goes on
    print(f'train_step raised {type(e).__name__}: {e}')
for p in shards.values():
    p.grad = None
opt.zero_grad(set_to_none=True)
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
got = sorted({n.split('.')[-2] for n, p in {**dict(model.named_parameters()), **shards}.items() if '.lora_' in n and p.grad is not None})
assert got == ['other'], f"expected train_step to put gradients on the LoRA weights of ['other'] only, got {got}"
dist.destroy_process_group()
