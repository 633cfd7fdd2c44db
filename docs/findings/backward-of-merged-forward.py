"""PEFT LoRA (no FSDP needed): merge; forward; unmerge; backward

Expected: backward puts gradients on {default} (LoRA weights); it got no_grad_fn.
Run: python backward-of-merged-forward.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 8))]))
model = get_peft_model(net, LoraConfig(r=3, lora_alpha=6, target_modules=['lin0'], init_lora_weights=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
model.base_model.merge_adapter()
loss = model(x).sum()
model.base_model.unmerge_adapter()
try:
    loss.backward()
except Exception as e:
    raise AssertionError(f"expected backward to run and train ['default'], it raised {type(e).__name__}: {e}") from e
