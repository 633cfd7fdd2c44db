"""PEFT LoRA (no FSDP needed): an add_adapter PEFT refuses part-way leaves the adapter in the layers
injected before the refusal and the active adapter frozen (huggingface/peft#3707).

Expected: a refused add_adapter leaves the model as it was: 'default' trainable, no 'other' layers.
Run: python half-added-adapter.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, Python 3.11.7, CPU.
"""
from collections import OrderedDict

import torch.nn as nn
from peft import LoraConfig, get_peft_model

net = nn.Sequential(OrderedDict([("lin0", nn.Linear(10, 6)), ("lin1", nn.Linear(6, 2))]))
model = get_peft_model(net, LoraConfig(r=4, target_modules=["lin0", "lin1"]))
# lin1 is already a LoRA layer: targeting its weight as a parameter is refused, after lin0 took 'other'
bad = LoraConfig(r=4, target_modules=["lin0"], target_parameters=["lin1.weight"], inference_mode=True)
try:
    model.add_adapter("other", bad)
except ValueError as e:
    print(f"add_adapter raised ValueError: {e}")
left = sorted(n for n, _ in model.named_parameters() if ".other." in n)
frozen = sorted(n for n, p in model.named_parameters() if ".default." in n and not p.requires_grad)
assert not left and not frozen, f"expected the refused add_adapter to change nothing, got 'other' in {left}, 'default' frozen in {frozen}"
