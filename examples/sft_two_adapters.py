"""SFT with two LoRA adapters trained in turn and a periodic no_grad eval, under FSDP2 on CPU/gloo.

Run: torchrun --nproc_per_node=2 examples/sft_two_adapters.py
Recorded: fsdpsim record --out examples/sft_two_adapters.seq -- torchrun --nproc_per_node=2 examples/sft_two_adapters.py
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


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 4)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


torch.manual_seed(0)
config = LoraConfig(r=4, lora_alpha=8, target_modules=["up", "down"])
model = get_peft_model(MLP(), config, adapter_name="task_a")
model.add_adapter("task_b", config)
fully_shard(model.base_model.model.up, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

x, y = torch.randn(8, 16), torch.randn(8, 4)
for task in ("task_a", "task_b"):
    model.set_adapter(task)
    for step in range(4):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 2 == 1:
            with torch.no_grad():
                eval_loss = nn.functional.mse_loss(model(x), y)
            if rank == 0:
                print(f"{task} step {step}: loss {loss.item():.6f} eval {eval_loss.item():.6f}", flush=True)
dist.destroy_process_group()
