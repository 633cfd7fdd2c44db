"""A script using calls the .seq vocabulary cannot say: an Embedding, a ParameterList-free
LayerNorm, a LoRA dropout and get_peft_model_state_dict outside save_pretrained (record's header must
list them); its merge_and_unload is an op."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, ids):
        return self.norm(self.proj(self.emb(ids)))


torch.manual_seed(0)
model = get_peft_model(Net(), LoraConfig(r=2, target_modules=["proj"], lora_dropout=0.1))
fully_shard(model, mesh=mesh)
model(torch.arange(4)).sum().backward()
adapter_weights = get_peft_model_state_dict(model)
merged = model.merge_and_unload()
dist.destroy_process_group()
