"""A tiny Llama with a LoRA adapter prepared by accelerate's FSDP2 path (transformer-layer auto-wrap),
then trained with accelerator.backward. accelerate selects FSDP only on an accelerator device; on CPU
the shared state is set to FSDP as accelerate's own test scripts do (test_distributed_data_loop.py)."""

import warnings

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from transformers import LlamaConfig, LlamaForCausalLM

from peft import LoraConfig, get_peft_model

warnings.simplefilter("ignore")
torch.manual_seed(0)
plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                        transformer_cls_names_to_wrap=["LlamaDecoderLayer"])
acc = Accelerator(cpu=True, fsdp_plugin=plugin)
acc.state.distributed_type = DistributedType.FSDP
acc.state.fsdp_plugin = plugin
config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=64)
model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model, opt = acc.prepare(model, opt)
ids = torch.arange(2 * 10).view(2, 10) % 64
for step in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
    if acc.is_main_process:
        print(f"[world={acc.num_processes}] step {step}: loss {loss.item():.6f}", flush=True)
