"""FSDP2 + PEFT LoRA: forward; set_adapter other; backward; train_step

Expected: train_step puts gradients on {other} (LoRA weights); it got {}.
Run: torchrun --nproc_per_node=1 checkpoint-error-wedges-fsdp.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(10, 20))]))
model = get_peft_model(net, LoraConfig(r=8, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
model.add_adapter('other', LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
model.base_model.model.set_submodule('lin0', checkpoint_wrapper(model.base_model.model.lin0, preserve_rng_state=False))
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
loss = model(x).sum()
model.set_adapter('other')
try:
    loss.backward()
except Exception as e:  # it raises here too: the sequence goes on
    print(f'backward raised {type(e).__name__}: {e}')
for p in shards.values():
    p.grad = None
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
got = sorted({n.split('.')[-2] for n, p in {**dict(model.named_parameters()), **shards}.items() if '.lora_' in n and p.grad is not None})
assert got == ['other'], f"expected train_step to put gradients on the LoRA weights of ['other'] only, got {got}"
dist.destroy_process_group()
