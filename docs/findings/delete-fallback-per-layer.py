"""PEFT LoRA (no FSDP needed): delete_adapter default; train_step

Expected: train_step puts gradients on {other} (LoRA weights); it got {other,third}.
Run: python delete-fallback-per-layer.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(4, 6)), ('lin1', nn.Linear(6, 2))]))
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
model.add_adapter('other', LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
model.add_adapter('third', LoraConfig(r=3, lora_alpha=6, target_modules=['lin1'], init_lora_weights=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
model.delete_adapter('default')
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
got = sorted({n.split('.')[-2] for n, p in model.named_parameters() if '.lora_' in n and p.grad is not None})
assert got == ['other'], f"expected train_step to put gradients on the LoRA weights of ['other'] only, got {got}"
