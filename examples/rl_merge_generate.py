"""An RL loop's weight sync: merge the adapter into the base weights, roll out with the merged
model (a no_grad forward stands for generate), unmerge, then train the adapter on the rollout.
FSDP2 on CPU/gloo.

Run: torchrun --nproc_per_node=2 examples/rl_merge_generate.py
Recorded: fsdpsim record --out examples/rl_merge_generate.seq -- torchrun --nproc_per_node=2 examples/rl_merge_generate.py
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


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(12, 24)
        self.l2 = nn.Linear(24, 6)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


torch.manual_seed(0)
model = get_peft_model(Actor(), LoraConfig(r=4, lora_alpha=8, target_modules=["l1", "l2"], init_lora_weights=False))
fully_shard(model.base_model.model.l1, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)

prompts = torch.randn(8, 12)
for it in range(3):
    model.merge_adapter()  # weight sync: the rollout engine reads merged weights
    with torch.no_grad():
        rollout = model(prompts).softmax(-1)
    model.unmerge_adapter()
    optimizer.zero_grad()
    logp = model(prompts).log_softmax(-1)
    loss = -(rollout * logp).sum(-1).mean()
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"iteration {it}: loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
