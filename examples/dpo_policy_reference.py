"""DPO-style training with a policy and a reference adapter on one base model (TRL's
`ref_adapter_name` pattern): each step switches to the reference for a no_grad pass, back to the
policy, and trains it on a loss of both. FSDP2 on CPU/gloo.

Run: torchrun --nproc_per_node=2 examples/dpo_policy_reference.py
Recorded: fsdpsim record --out examples/dpo_policy_reference.seq -- torchrun --nproc_per_node=2 examples/dpo_policy_reference.py
"""

import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from peft import LoraConfig, get_peft_model

warnings.simplefilter("ignore")
dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 32)
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


torch.manual_seed(0)
config = LoraConfig(r=4, lora_alpha=8, target_modules=["body", "head"], init_lora_weights=False)
model = get_peft_model(Policy(), config, adapter_name="policy")
model.add_adapter("reference", config)
fully_shard(model.base_model.model.body, mesh=mesh, reshard_after_forward=False)
fully_shard(model, mesh=mesh, reshard_after_forward=False)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)

chosen, rejected = torch.randn(4, 16), torch.randn(4, 16)
for step in range(3):
    with torch.no_grad():
        model.set_adapter("reference")
        ref_margin = model(chosen).logsumexp(-1) - model(rejected).logsumexp(-1)
    model.set_adapter("policy")
    optimizer.zero_grad()
    margin = model(chosen).logsumexp(-1) - model(rejected).logsumexp(-1)
    loss = -nn.functional.logsigmoid(0.1 * (margin - ref_margin)).mean()
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step}: loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
