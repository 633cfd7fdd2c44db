"""PEFT LoRA (no FSDP needed): save_adapters; delete_adapter default; load_adapters

Expected: what is saved holds every selected adapter's whole tensors, and loads back.
Run: python raises-in.load_adapters.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(10, 20))]))
model = get_peft_model(net, LoraConfig(r=8, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
saved = {a: get_peft_model_state_dict(model, adapter_name=a) for a in model.peft_config}
model.delete_adapter('default')
try:
    for a, sd in saved.items():
        set_peft_model_state_dict(model, sd, adapter_name=a)
except Exception as e:
    raise AssertionError(f"expected load_adapters to load what save_adapters wrote, it raised {type(e).__name__}: {e}") from e
