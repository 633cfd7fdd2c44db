"""Measures what the pinned torch / bitsandbytes / PEFT / accelerate do with a 4-bit (QLoRA) base
layer on CPU, the facts docs/design/upstream-backend.md states for `quant=`:
  dispatch   which LoRA class PEFT's dispatcher picks, with and without the model's is_loaded_in_4bit
  merge      merge / unmerge on a Linear4bit base: dequantize, add, requantize, judged against the
             quantization step of the block each weight sits in
  shard      fully_shard on a uint8 Params4bit (world 2, gloo): what the parameter becomes,
             whether forward / backward still run, and a merge afterwards (on the shard)
  ignored    accelerate's exclusion of frozen uint8 Params4bit (ignored_params) instead
  meta       a Linear4bit built on meta (what ram-efficient loading hands ranks > 0) moved to cpu
Run: .venv/bin/python real_backend/upstream/probes/qlora_measure.py [dispatch|merge|shard|ignored|meta]"""
import os
import socket
import sys

import torch
import torch.nn as nn


def net(quant="nf4", device=None):
    import bitsandbytes as bnb

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin0 = bnb.nn.Linear4bit(128, 8, bias=True, compute_dtype=torch.float32, quant_type=quant,
                                          device=device)
            self.lin1 = nn.Linear(8, 4, device=device)

        def forward(self, x):
            return self.lin1(torch.relu(self.lin0(x)))

    torch.manual_seed(0)
    return Net()


def peft(model, loaded_in_4bit=True):
    from peft import LoraConfig, get_peft_model
    if loaded_in_4bit:
        model.is_loaded_in_4bit = True  # what transformers sets on a model loaded with load_in_4bit
    return get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["lin0"], init_lora_weights=False))


def dequant(w):
    import bitsandbytes.functional as F
    return F.dequantize_4bit(w.data, w.quant_state).float()


def half_step(w, quant):
    """Per weight: half the widest gap between adjacent code values of its quant_type, times its
    block's absmax, the most a round-to-nearest requantization can move it."""
    import bitsandbytes.functional as F
    code = F.get_4bit_type(quant, device="cpu").float().sort().values
    gap = (code[1:] - code[:-1]).max().item() / 2
    qs = w.quant_state
    absmax = qs.absmax
    if qs.nested:  # compress_statistics (Linear4bit's default): the absmax are quantized too
        absmax = F.dequantize_blockwise(absmax, qs.state2) + qs.offset
    absmax = absmax.float().repeat_interleave(qs.blocksize)[: qs.shape.numel()]
    return gap * absmax.reshape(qs.shape)


def measure_dispatch():
    for flag in (False, True):
        m = peft(net().to("cpu"), loaded_in_4bit=flag)
        lin = m.base_model.model.lin0
        try:
            lin.merge()
            merged = "merge ran"
        except Exception as e:  # noqa: BLE001 (the probe reports what raised)
            merged = f"merge raised {type(e).__name__}: {str(e)[:120]}"
        print(f"dispatch is_loaded_in_4bit={flag}: {type(lin).__module__}.{type(lin).__name__}; {merged}")


def measure_merge(quant):
    m = peft(net(quant).to("cpu"))
    lin = m.base_model.model.lin0
    w0 = dequant(lin.base_layer.weight)
    delta = lin.get_delta_weight("default").float()
    lin.merge()
    w1 = dequant(lin.base_layer.weight)
    bound1 = half_step(lin.base_layer.weight, quant)
    err1 = (w1 - (w0 + delta)).abs()
    lin.unmerge()
    w2 = dequant(lin.base_layer.weight)
    bound2 = half_step(lin.base_layer.weight, quant)
    err2 = (w2 - (w1 - delta)).abs()
    print(f"merge {quant}: |W1 - (W0+dW)| max {err1.max():.4g}, within the requantization half-step: "
          f"{bool((err1 <= bound1 + 1e-6).all())}; unmerge: |W2 - (W1-dW)| max {err2.max():.4g}, within: "
          f"{bool((err2 <= bound2 + 1e-6).all())}; W2 == W0: {torch.equal(w2, w0)}, |W2 - W0| max {(w2 - w0).abs().max():.4g}")


def rank_main(rank, world, port, mode):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    m = peft(net().to("cpu"))
    w = m.base_model.model.lin0.base_layer.weight
    kw = {}
    if mode == "ignored":  # accelerate/utils/fsdp_utils.py::fsdp2_prepare_model's exclusion
        kw["ignored_params"] = {p for p in m.parameters() if type(p).__name__ == "Params4bit"
                                and not p.requires_grad and not p.is_floating_point()}
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(1))
    ref = m(x).detach()
    try:
        fully_shard(m.base_model.model.lin0, mesh=mesh, **kw)
        fully_shard(m, mesh=mesh, **kw)
        w = m.base_model.model.lin0.base_layer.weight
        local = w.to_local() if hasattr(w, "to_local") else w
        out = m(x)
        out.sum().backward()
        print(f"rank {rank} {mode}: weight {type(w).__name__} {w.dtype} global {tuple(w.shape)} local {tuple(local.shape)}, "
              f"quant_state on it {getattr(w, 'quant_state', None) is not None}; forward equals unsharded "
              f"{torch.equal(out.detach(), ref)}, lora_A grad {m.base_model.model.lin0.lora_A['default'].weight.grad is not None}")
        try:  # trl#5975: merge_adapter with the 4-bit weight sharded (outside forward: the shard)
            m.base_model.model.lin0.merge()
            print(f"rank {rank} {mode}: merge after the step ran")
        except Exception as e:  # noqa: BLE001
            print(f"rank {rank} {mode}: merge after the step raised {type(e).__name__}: {str(e)[:160]}")
    except Exception as e:  # noqa: BLE001
        print(f"rank {rank} {mode}: raised {type(e).__name__}: {str(e)[:200]}")
    dist.destroy_process_group()


def measure_sharded(mode):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(2, port, mode), nprocs=2)


def measure_meta():
    m = net(device="meta")
    try:
        m.to("cpu")
        print(f"meta: moved to cpu, weight {m.lin0.weight.dtype} {tuple(m.lin0.weight.shape)}")
    except Exception as e:  # noqa: BLE001
        print(f"meta: .to('cpu') raised {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    what = sys.argv[1:] or ["dispatch", "merge", "shard", "ignored", "meta"]
    for w in what:
        if w == "dispatch":
            measure_dispatch()
        elif w == "merge":
            measure_merge("nf4")
            measure_merge("fp4")
        elif w in ("shard", "ignored"):
            measure_sharded(w)
        elif w == "meta":
            measure_meta()
