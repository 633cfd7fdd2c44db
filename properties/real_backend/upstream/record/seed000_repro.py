"""set_adapter() on a merged model under FSDP2 (reshard_after_forward=False): which adapter gets gradients per step."""

import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from peft import LoraConfig, get_peft_model

warnings.simplefilter("ignore")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0 = nn.Linear(10, 20)
        self.relu = nn.ReLU()
        self.lin1 = nn.Linear(20, 2)

    def forward(self, X):
        return self.lin1(self.relu(self.lin0(X)))


def run(unmerge_first):
    torch.manual_seed(0)
    cfg = LoraConfig(target_modules=["lin0", "lin1"], init_lora_weights=False)
    model = get_peft_model(MLP(), cfg)
    model.add_adapter("other", cfg)
    fully_shard(model.base_model.model.lin0, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    shards = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    assert all(isinstance(p, DTensor) for p in shards.values())
    X = torch.arange(90).view(9, 10).float()

    with torch.no_grad():
        model(X)
    model.merge_adapter()
    if unmerge_first:
        model.unmerge_adapter()
    model.set_adapter("other")
    out = []
    for step in (1, 2, 3):
        for p in shards.values():
            p.grad = None
        try:
            model(X).sum().backward()
        except RuntimeError as e:
            out.append(f"step {step}: RuntimeError: {e}")
            break
        with_grad = sorted({n.split(".lora_")[1].split(".")[1] for n, p in shards.items() if p.grad is not None})
        out.append(f"step {step}: grads on {with_grad}")
    if rank == 0:
        print(f"[world={world}] unmerge before set_adapter={unmerge_first}: " + "; ".join(out), flush=True)


run(unmerge_first=False)
run(unmerge_first=True)
dist.destroy_process_group()
