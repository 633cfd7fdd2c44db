"""PEFT LoRA (no FSDP needed): train_step; merge; step

Expected: a layer's weight equals its initial value plus the deltas of the adapters it lists as merged.
Run: python training-a-merged-adapter.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 5))]))
w0 = net.get_submodule('lin0').weight.detach().clone()
model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False), adapter_name='a')
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
model.base_model.merge_adapter()
opt.step()
layer = model.base_model.model.lin0
delta = sum(((layer.lora_B[a].weight) @ (layer.lora_A[a].weight) * layer.scaling[a] for a in layer.merged_adapters), torch.zeros_like(w0))
error = ((layer.get_base_layer().weight).detach() - w0 - delta).abs().max().item()
assert error < 1e-4, f"expected lin0.weight == its initial value + the deltas of merged_adapters={layer.merged_adapters}, got a difference of {error:.3g}"
