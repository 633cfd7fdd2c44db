"""PEFT LoRA (no FSDP needed): save_adapters

Expected: what is saved holds every selected adapter's whole tensors, and loads back.
Run: python save-skips-checkpointed-layers.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin2', nn.Linear(4, 2))]))
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin2'], init_lora_weights=False))
model.base_model.model.set_submodule('lin2', checkpoint_wrapper(model.base_model.model.lin2, preserve_rng_state=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
saved = {a: get_peft_model_state_dict(model, adapter_name=a) for a in model.peft_config}
missing = sorted(a for a in model.peft_config if not saved.get(a))
assert not missing, f"expected a state dict with the tensors of every adapter to save, got none for {missing}"
