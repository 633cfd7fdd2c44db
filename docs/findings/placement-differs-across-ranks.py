"""S5 under FSDP2 + PEFT LoRA at step 1 (prepare): collective mismatch: rank 0 in broadcast(lin0.lora_A.other, 40 bf16) at step 1

fsdpsim finding: S5 step 1: collective mismatch: rank 0 in broadcast(lin0.lora_A.other, 40 bf16) at step 1; rank 1 in broadcast(lin0.lora_A.other, 40 fp32) at step 1
Class signature: S5:mismatch | *(-) | world=2 loading=ram_efficient dtype=bf16 autocast=false
Expected: step 1 (prepare): every rank issues the same broadcasts (each state-dict entry of one size and dtype on every rank), lin0.lora_A.other included

Sequence: 1 ops at world 2 (CPU, gloo): prepare
Scenario: dtype bf16; ram-efficient loading (accelerate's fsdp2_load_full_state_dict).
Confirmed on: torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, transformers 5.24.0, Python 3.11.7; CPU, gloo, world 2.
Run: torchrun --nproc_per_node=2 repro.py
Exit: 1 the bug reproduces, 0 it does not (fixed), 2 it fails differently (an unexpected
exception, or the check violated another way); every rank exits with the same code, and
torchrun reports a rank's non-zero code as its own exit 1 (the code is in its summary).
Exported by fsdpsim export --python from docs/findings/placement-differs-across-ranks.seq.
"""
import os
import sys
from types import SimpleNamespace
from datetime import timedelta
from importlib.metadata import version

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

REPRODUCED, FIXED, DIFFERENT = 1, 0, 2
RESULT = {1: "the bug reproduces", 0: "it does not reproduce", 2: "it fails differently"}
EXPECTED = 'step 1 (prepare): every rank issues the same broadcasts (each state-dict entry of one size and dtype on every rank), lin0.lora_A.other included'
# each adapter parameter (fsdpsim's name) -> its adapter, from the scenario's declarations
ADAPTER_OF = {'lin0.lora_A.default': 'default', 'lin0.lora_B.default': 'default', 'lin0.lora_A.other': 'other', 'lin0.lora_B.other': 'other'}
RECORDED_STATUS = 'mismatch'
RECORDED_TENSOR = 'lin0.lora_A.other'
RECORDED_CALLS = ['40 bf16', '40 fp32']
DTYPES = {'torch.bfloat16': 'bf16', 'torch.float32': 'fp32'}


class Net(nn.Module):
    """lin0 in order, ReLU between them."""

    def __init__(self):
        super().__init__()
        self.lin0 = nn.Linear(20, 20)

    def forward(self, x):
        return self.lin0(x)


def short(name):
    """fsdpsim's name of a parameter: lin0.lora_A.default for base_model.model.lin0.lora_A.default.weight."""
    name = name.replace("base_model.model.", "").replace("_checkpoint_wrapped_module.", "")
    return name.removesuffix(".weight") if ".lora_" in name else name


def registered(model):
    """What the modules hold now: the unsharded copies while a group is unsharded, else the shards."""
    return {short(n): p for n, p in model.named_parameters()}


def adapter_params(model, shards):
    """Each adapter parameter still in the model, as the object its gradient lands on:
    the shard FSDP registered at fully_shard, or the plain parameter of a layer FSDP does not manage."""
    return [(n, shards.get(n, p)) for n, p in registered(model).items() if n in ADAPTER_OF]


def status_of(e):
    """The class fsdpsim records for an exception, and its first line."""
    text = (str(e).strip().splitlines() or [""])[0]
    if isinstance(e, KeyError):
        return "key_error", text
    if isinstance(e, RuntimeError) and "does not require grad and does not have a grad_fn" in text:
        return "no_grad_fn", text
    if isinstance(e, RuntimeError) and any(k in text for k in ("shape", "size mismatch", "must match the size",
                                                               "einsum", "size of tensor")):
        return "shape_error", text
    if isinstance(e, (ValueError, AssertionError)):
        return ("value_error" if isinstance(e, ValueError) else "assertion_error"), text
    return "exception", f"{type(e).__name__}: {text}"


def before(model, shards):
    """torch.distributed.broadcast wrapped for the op to note each call's size and dtype on this rank
    (accelerate's fsdp2_load_full_state_dict issues one per state-dict entry): gloo pairs calls by
    order, not by name or size, so a pair that differs is a mismatch whatever it then does."""
    calls, real = [], dist.broadcast

    def noting(tensor, *args, **kwargs):
        calls.append(f"{tensor.numel()} {DTYPES.get(str(tensor.dtype), str(tensor.dtype))}")
        return real(tensor, *args, **kwargs)

    dist.broadcast = noting
    return calls, real


def check(model, shards, snap, status, message, result):
    """The i-th broadcast of every rank against the others' (over a fresh group: the default one may
    be stuck after a timed-out collective)."""
    calls, dist.broadcast = snap
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, (status, message, calls), group=dist.new_group(backend="gloo"))
    failed = [f"rank {r} {s}: {m}" for r, (s, m, _) in enumerate(every) if s != "ok"]
    n = max(len(c) for _, _, c in every)
    first = next((i for i in range(n) if len({c[i] if i < len(c) else "none" for _, _, c in every}) > 1), None)
    if first is None and not failed:
        return FIXED, f"every rank issued the same {n} broadcasts"
    if first is None:
        return REPRODUCED, "; ".join(failed)
    name = short(list(model.state_dict())[first])
    got = f"broadcast({name}): " + ", ".join(f"rank {r} {c[first] if first < len(c) else 'none'}"
                                                for r, (_, _, c) in enumerate(every))
    return (REPRODUCED if (name, [c[first] for _, _, c in every]) == (RECORDED_TENSOR, RECORDED_CALLS)
            else DIFFERENT), got


def shard(model, mesh):
    """fully_shard bottom-up; the shards it registers (the objects gradients land on) and the optimizer."""
    # loading ram_efficient, as accelerate's fsdp2_prepare_model does it: the full state dict (real on
    # rank 0 only), the model to meta, fully_shard, then rank 0 broadcasts every entry
    full_sd = model.state_dict()
    model.to("meta")
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    # the one attribute of the Accelerator that fsdp2_load_full_state_dict reads
    fsdp2_load_full_state_dict(SimpleNamespace(is_main_process=dist.get_rank() == 0), model, full_sd)
    shards = registered(model)
    return shards, make_optimizer(model, shards)


def make_optimizer(model, shards):
    params = optimizer_params(model, shards)
    return torch.optim.AdamW(params, lr=1e-2) if params else None


def optimizer_params(model, shards):
    return [p for n, p in adapter_params(model, shards) if p.requires_grad]


def groups(model):
    """The FSDP modules by fsdpsim's group name."""
    return {'root': model}


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    if rank == 0:
        print(", ".join(f"{p} {version(p)}" for p in ("torch", "peft", "accelerate", "transformers")) +
              f", Python {sys.version.split()[0]}", flush=True)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    if rank > 0:  # loading ram_efficient: only rank 0 loads the weights, the others build on meta
        with torch.device("meta"):
            net = Net()
    else:
        net = Net()
    model = get_peft_model(net.to(torch.bfloat16), LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False), adapter_name='default', autocast_adapter_dtype=False)
    model.add_adapter('other', LoraConfig(r=2, lora_alpha=4, target_modules=['lin0'], init_lora_weights=False), autocast_adapter_dtype=False)
    x = torch.randn(4, 20, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    shards, opt = {}, None
    at = None
    try:
        at = None  # step 1, where the finding shows: checked below
        runs = True
        snap = before(model, shards) if runs else None
        status, message = "ok", ""
        try:
            if runs:
                shards, opt = shard(model, mesh)
        except Exception as e:
            status, message = status_of(e)
        code, got = check(model, shards, snap, status, message, None)
    except Exception as e:
        code, got = DIFFERENT, f"{at} raised {type(e).__name__}: {e}"
    finish(code, got)


def finish(code, got):
    """After a timed-out or failed collective the default group is of no more use: the ranks agree
    over a fresh one (every rank's verdict; the bug reproduces when any rank's collective failed).
    When even that fails, each rank reports its own code."""
    mine = (code, got, dist.get_rank())
    try:
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
        results = [None] * dist.get_world_size()
        dist.all_gather_object(results, mine, group=group)
    except Exception as e:
        results = [(code, f"{got} (rank {dist.get_rank()} alone: {type(e).__name__})", None)]
    codes = [c for c, _, _ in results]
    code = DIFFERENT if DIFFERENT in codes else max(codes)
    if dist.get_rank() == 0 or len(results) == 1:
        gots = [(r, g) for c, g, r in results if c == code]
        one = len({g for _, g in gots}) == 1
        shown = gots[0][1] if one else "; ".join(f"rank {r}: {g}" for r, g in gots)
        print(f"expected: {EXPECTED}", flush=True)
        print(f"got: {shown}", flush=True)
        print(f"result: {RESULT[code]} (exit {code})", flush=True)
    leave(code)


def leave(code):
    """Exit with the verdict, skipping interpreter teardown: with FSDP2 and PEFT loaded it sometimes
    aborts after the verdict is printed (terminate called without an active exception)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
