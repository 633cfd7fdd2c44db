"""A tiny Llama under FSDP2 with two LoRA adapters, as a user writes it: every decoder layer its own
unit, then the PEFT model; two training steps on the policy adapter, a no_grad pass on the reference,
then a greedy rollout of the policy (generate, as an RL loop samples: the reference pass left the root
unit unsharded, which PeftModel.generate needs), and a full model state dict (DCP) saved and loaded back."""

import warnings

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

from peft import LoraConfig, get_peft_model

warnings.simplefilter("ignore")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)

config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=64, tie_word_embeddings=False)
model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj", "q_proj"]),
                       adapter_name="policy")
model.add_adapter("reference", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
for layer in model.base_model.model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
ids = torch.arange(2 * 12).view(2, 12) % 64

for step in range(2):
    model.set_adapter("policy")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    model.set_adapter("reference")
    with torch.no_grad():
        ref = model(input_ids=ids, labels=ids).loss
    if rank == 0:
        print(f"[world={world}] step {step}: loss {loss.item():.6f} reference {ref.item():.6f}", flush=True)
model.set_adapter("policy")
with torch.no_grad():
    prompt = ids[:, :4]
    rollout = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3,
                             do_sample=False, pad_token_id=0)
if rank == 0:
    print(f"[world={world}] rollout {rollout.tolist()}", flush=True)
full = StateDictOptions(full_state_dict=True)
kept = get_model_state_dict(model, options=full)
set_model_state_dict(model, kept, options=full)
dist.destroy_process_group()
