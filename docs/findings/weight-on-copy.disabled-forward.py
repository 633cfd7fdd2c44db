"""FSDP2 + PEFT LoRA: merge; disable_enter; train_step

Expected: a layer's weight equals its initial value plus the deltas of the adapters it lists as merged.
Run: torchrun --nproc_per_node=1 weight-on-copy.disabled-forward.py  (exit 1 at the assert while the bug is there, 0 once fixed)
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
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 8))]))
w0 = net.get_submodule('lin0').weight.detach().clone()
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False), adapter_name='reference')
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
model.base_model.merge_adapter()
ctx = model.disable_adapter()
ctx.__enter__()
try:
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()
except Exception as e:  # it raises here too: the sequence goes on
    print(f'train_step raised {type(e).__name__}: {e}')
layer = model.base_model.model.lin0
delta = sum((full(layer.lora_B[a].weight) @ full(layer.lora_A[a].weight) * layer.scaling[a] for a in layer.merged_adapters), torch.zeros_like(w0))
error = (full(layer.get_base_layer().weight).detach() - w0 - delta).abs().max().item()
assert error < 1e-4, f"expected lin0.weight == its initial value + the deltas of merged_adapters={layer.merged_adapters}, got a difference of {error:.3g}"
dist.destroy_process_group()
