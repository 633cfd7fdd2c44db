"""PEFT LoRA (no FSDP needed): disable_enter; disable_exit; train_step

Expected: train_step puts no gradients (LoRA weights); it got {reference}.
Run: python enable-ignores-inference-mode.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 8))]))
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False, inference_mode=True), adapter_name='reference')
opt = None  # nothing is trainable
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
ctx = model.disable_adapter()
ctx.__enter__()
ctx.__exit__(None, None, None)
model.zero_grad(set_to_none=True)
loss = model(x).sum()
if loss.requires_grad:
    loss.backward()
got = sorted({n.split('.')[-2] for n, p in model.named_parameters() if '.lora_' in n and p.grad is not None})
assert got == [], f"expected train_step to put gradients on the LoRA weights of [] only, got {got}"
