"""FSDP2 + PEFT LoRA: load_adapter third frozen; train_step

Expected: train_step puts gradients on {default} (LoRA weights); it got no_grad_fn.
Run: torchrun --nproc_per_node=1 half-added-adapter.py  (exit 1 at the assert while the bug is there, 0 once fixed)
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict
import tempfile

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
tmp = tempfile.TemporaryDirectory()  # removed at exit
torch.manual_seed(0)


def base():  # a second base model: the source of the loaded adapter
    return nn.Sequential(OrderedDict([('lin0', nn.Linear(10, 6)), ('lin1', Experts(3, 6, 2))]))


net = base()
model = get_peft_model(net, LoraConfig(r=3, lora_alpha=3, target_modules=['lin0'], init_lora_weights=False))
model.add_adapter('other', LoraConfig(r=4, lora_alpha=4, target_modules=['lin0'], target_parameters=['lin1.weight'], init_lora_weights=False))
fully_shard(model.base_model.model.lin1, mesh=mesh, reshard_after_forward=True)
fully_shard(model, mesh=mesh, reshard_after_forward=True)
shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
try:
    get_peft_model(base(), LoraConfig(r=2, lora_alpha=2, target_modules=['lin0'], target_parameters=['lin1.weight'], init_lora_weights=False), adapter_name='third').save_pretrained(tmp.name)
    model.load_adapter(tmp.name + '/third', adapter_name='third', is_trainable=False)
except Exception as e:  # it raises here too: the sequence goes on
    print(f'load_adapter raised {type(e).__name__}: {e}')
try:
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()
except Exception as e:
    raise AssertionError(f"expected train_step to run and train ['default'], it raised {type(e).__name__}: {e}") from e
dist.destroy_process_group()
