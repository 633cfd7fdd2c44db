"""PEFT LoRA (no FSDP needed): disable_enter; set_adapter b; disable_exit; train_step

Expected: train_step puts gradients on {a} (LoRA weights); it got {b}.
Run: python disable-exit-not-scoped.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 5))]))
model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False), adapter_name='a')
model.add_adapter('b', LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
ctx = model.disable_adapter()
ctx.__enter__()
model.set_adapter('b')
ctx.__exit__(None, None, None)
model.zero_grad(set_to_none=True)
model(x).sum().backward()
opt.step()
got = sorted({n.split('.')[-2] for n, p in model.named_parameters() if '.lora_' in n and p.grad is not None})
assert got == ['a'], f"expected train_step to put gradients on the LoRA weights of ['a'] only, got {got}"
