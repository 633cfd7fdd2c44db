"""FSDP2 + PEFT LoRA: prepare

Expected: every rank holds the same state and issues the same collectives.
Run: torchrun --nproc_per_node=2 placement-differs-across-ranks.py  (exit 1 at the assert while the bug is there, 0 once fixed)

accelerate: meta weights on ranks > 0, fully_shard, then fsdp2_load_full_state_dict: accelerate's cpu_ram_efficient_loading path. A training script doing the same under `accelerate launch --use_fsdp --fsdp_version 2 train.py` on GPUs takes this path (not run on GPU here).
Written for torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, Python 3.11.7, CPU, gloo; not run by the export.
"""
from collections import OrderedDict
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
with torch.device('meta' if rank > 0 else 'cpu'):  # rank 0 alone loads the weights
    net = nn.Sequential(OrderedDict([('lin0', nn.Linear(20, 20))])).to(torch.bfloat16)
model = get_peft_model(net, LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False), autocast_adapter_dtype=False)
model.add_adapter('other', LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False), autocast_adapter_dtype=False)
x = torch.randn(4, 20, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
try:
    full_sd = model.state_dict()
    model.to('meta')
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    fsdp2_load_full_state_dict(SimpleNamespace(is_main_process=rank == 0), model, full_sd)
    shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here
    opt = torch.optim.AdamW([p for n, p in shards.items() if p.requires_grad], lr=1e-2)
except Exception as e:
    raise AssertionError(f"expected prepare to complete on every rank, it raised {type(e).__name__}: {e}") from e
every = [None] * dist.get_world_size()
dist.all_gather_object(every, {n: str(p.dtype) for n, p in model.named_parameters()})
assert all(d == every[0] for d in every), f"expected every rank to hold each parameter in one dtype, got {[{n: d for n, d in e.items() if d != every[0][n]} for e in every]}"
dist.barrier()  # every rank is done with its collectives before any tears down
dist.destroy_process_group()
