"""PEFT LoRA (no FSDP needed): save_adapters

Expected: what is saved holds every selected adapter's whole tensors, and loads back.
Run: python save-selects-active-only.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 8))]))
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False), adapter_name='a')
model.add_adapter('b', LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
# not PEFT's default: only the active adapter, as accelerate's non-FSDP2 adapter_only path selects
saved = {a: get_peft_model_state_dict(model, adapter_name=a) for a in model.base_model.active_adapters}
missing = sorted(a for a in model.peft_config if not saved.get(a))
assert not missing, f"expected a state dict with the tensors of every adapter to save, got none for {missing}"
