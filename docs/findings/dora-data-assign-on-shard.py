"""FSDP2 + PEFT DoRA: merge_adapter() for generation after a training step is lost on the sharded layer

Expected: after merge_adapter() the model's output equals the unmerged DoRA output (a merge changes no output).
Run: torchrun --nproc_per_node=2 dora-data-assign-on-shard.py  (exit 1 at the assert while the bug is there, 0 once fixed)
DoraLinearVariant.merge_unsafe ends with `orig_weight.data = new_weight`; on the DTensor shard that assignment is a
no-op, so merged_adapters lists the adapter while the weight stays W0 and the forward skips DoRA.
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo. A draft for a person to own.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(5)
net = nn.Sequential(OrderedDict([('lin0', nn.Linear(8, 6)), ('lin1', nn.Linear(6, 4))]))
model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False, use_dora=True))
fully_shard(model.base_model.model.lin0, mesh=mesh, reshard_after_forward=True)
fully_shard(model, mesh=mesh, reshard_after_forward=True)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(6))
model(x).sum().backward()  # one training step
opt.step()
with torch.no_grad():
    unmerged = model(x)
    model.merge_adapter()  # merge for generation
    merged = model(x)
diff = (merged - unmerged).abs().max().item()
merged_list = model.base_model.model.lin0.merged_adapters
dist.barrier()  # every rank is done with its collectives before any tears down
assert diff < 1e-5, f"expected merge_adapter() to keep the output, got a max difference of {diff:.3g} with merged_adapters={merged_list}"
dist.destroy_process_group()
