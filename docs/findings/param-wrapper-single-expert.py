"""PEFT LoRA (no FSDP needed): train_step

Expected: get_delta_weight returns B @ A * scaling of the weights the optimizer steps.
Run: python param-wrapper-single-expert.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

class Experts(nn.Module):  # a mixture-of-experts weight (E, in, out), as PEFT's ParamWrapper takes it
    def __init__(self, experts, fan_in, fan_out):
        super().__init__()
        self.weight, self.is_transposed = nn.Parameter(torch.randn(experts, fan_in, fan_out) / fan_in ** 0.5), True

    def forward(self, x):
        return torch.einsum("bi,eio->bo", x, self.weight) / self.weight.shape[0]


torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('moe', Experts(1, 8, 4))]))
model = get_peft_model(net, LoraConfig(r=3, lora_alpha=6, target_parameters=['moe.weight'], init_lora_weights=False))
opt = torch.optim.AdamW([p for n, p in model.named_parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
try:
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()
except Exception as e:
    raise AssertionError(f"expected train_step to run, it raised {type(e).__name__}: {e}") from e
