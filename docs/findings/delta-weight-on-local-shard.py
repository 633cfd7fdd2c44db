"""FSDP2 + PEFT LoRA: delta_weight lin1

Expected: get_delta_weight returns B @ A * scaling of the weights the optimizer steps.
Run: torchrun --nproc_per_node=2 delta-weight-on-local-shard.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

class Experts(nn.Module):  # a mixture-of-experts weight (E, in, out), as PEFT's ParamWrapper takes it
    def __init__(self, experts, fan_in, fan_out):
        super().__init__()
        self.weight, self.is_transposed = nn.Parameter(torch.randn(experts, fan_in, fan_out) / fan_in ** 0.5), True

    def forward(self, x):
        return torch.einsum("bi,eio->bo", x, self.weight) / self.weight.shape[0]


dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
net = nn.Sequential(OrderedDict([('lin1', Experts(2, 4, 1))]))
model = get_peft_model(net, LoraConfig(r=2, lora_alpha=2, target_parameters=['lin1.weight'], init_lora_weights=False))
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
try:
    layer = model.base_model.model.lin1
    deltas = {a: layer.get_delta_weight(a) for a in model.base_model.active_adapters if a in layer.lora_A}
except Exception as e:
    raise AssertionError(f"expected delta_weight lin1 to run, it raised {type(e).__name__}: {e}") from e
dist.barrier()  # every rank is done with its collectives before any tears down
dist.destroy_process_group()
