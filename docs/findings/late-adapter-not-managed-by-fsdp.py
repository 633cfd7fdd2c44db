"""S5 under FSDP2 + PEFT LoRA at step 4 (train_step): ranks hold different values of {lin0.lora_A.late,lin0.lora_B.late} (no FSDP group manages them: nothing reduces their gradients)

fsdpsim finding: S5 step 4: ranks hold different values of {lin0.lora_A.late,lin0.lora_B.late} (no FSDP group manages them: nothing reduces their gradients)
Class signature: S5:disagree | add_adapter(S) set_adapter(S) new_optimizer(S) *(S) | world=2 data=per_rank deferred
Expected: after step 4 (train_step) every rank holds the same values of lin0.lora_A.late

Sequence: 4 ops at world 2 (CPU, gloo): add_adapter late; set_adapter late; new_optimizer; train_step
Confirmed on: torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, transformers 5.24.0, Python 3.11.7; CPU, gloo, world 2.
Run: torchrun --nproc_per_node=2 repro.py
Exit: 1 the bug reproduces, 0 it does not (fixed), 2 it fails differently (an unexpected
exception, or the check violated another way); every rank exits with the same code, and
torchrun reports a rank's non-zero code as its own exit 1 (the code is in its summary).
Exported by fsdpsim export --python from docs/findings/late-adapter-not-managed-by-fsdp.seq.
"""
import os
import sys
from importlib.metadata import version

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

REPRODUCED, FIXED, DIFFERENT = 1, 0, 2
RESULT = {1: "the bug reproduces", 0: "it does not reproduce", 2: "it fails differently"}
EXPECTED = 'after step 4 (train_step) every rank holds the same values of lin0.lora_A.late'
# each adapter parameter (fsdpsim's name) -> its adapter, from the scenario's declarations
ADAPTER_OF = {'lin0.lora_A.default': 'default', 'lin0.lora_B.default': 'default', 'lin0.lora_A.late': 'late', 'lin0.lora_B.late': 'late'}
RECORDED_STATUS = 'disagree'
FIELD_KIND = 'values'
FIELD_OF = 'lin0.lora_A.late'


class Net(nn.Module):
    """lin0 in order, ReLU between them."""

    def __init__(self):
        super().__init__()
        self.lin0 = nn.Linear(8, 8)

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


def accelerator():
    """accelerate's Accelerator with an FSDP2 plugin. On CPU its AcceleratorState settles on MULTI_CPU
    (prepare would wrap the model in DistributedDataParallel) whatever the plugin: the state is set
    to FSDP, from where Accelerator.prepare runs its own FSDP2 path (_prepare_fsdp2) on gloo."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    acc = Accelerator(cpu=True, fsdp_plugin=plugin)
    acc.state.distributed_type = DistributedType.FSDP
    acc.state.fsdp_plugin = plugin
    return acc


def before(model, shards):
    return None


def field(model, shards):
    """This rank's value of the field the ranks disagreed on."""
    if FIELD_KIND == "active":
        return sorted(model.base_model.active_adapters)
    if FIELD_KIND == "merged":
        return sorted(getattr(model.base_model.model, FIELD_OF).merged_adapters)
    p = shards.get(FIELD_OF, registered(model).get(FIELD_OF))
    if FIELD_KIND == "values":  # a plain (unsharded) tensor every rank should hold alike
        return [round(v, 6) for v in p.detach().float().flatten().tolist()]
    return str(p.dtype) if FIELD_KIND == "dtype" else p.requires_grad


def check(model, shards, snap, status, message, result):
    if status not in ("ok", RECORDED_STATUS):
        return DIFFERENT, f"{status}: {message}"
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, field(model, shards))
    got = ", ".join(f"rank {r} {v if FIELD_KIND != 'values' else 'values ' + str(v[:3])[:-1] + ', ...]'}"
                    for r, v in enumerate(values))
    return (FIXED if all(v == values[0] for v in values) else REPRODUCED), got


def shard(model, mesh):
    """The children's fully_shard as the scenario says, then accelerate's Accelerator.prepare with
    an FSDP2 plugin: the root's fully_shard, the optimizer switched to the shards and wrapped.
    The shards the model registers and the optimizer."""
    params = optimizer_params(model, registered(model))
    if not params:  # under FSDP2 Accelerator.prepare takes no model without its optimizer
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        return registered(model), None
    model, opt = accelerator().prepare(model, torch.optim.AdamW(params, lr=1e-2))
    model.set_reshard_after_forward(True, recurse=False)
    return registered(model), opt


def make_optimizer(model, shards):
    params = optimizer_params(model, shards)
    return torch.optim.AdamW(params, lr=1e-2) if params else None


def optimizer_params(model, shards):
    return [p for n, p in adapter_params(model, shards) if p.requires_grad]


def fsdp_module(m):
    """The module fully_shard was given: an adapter injected after fully_shard wraps it and keeps
    it as its base_layer (peft tuners_utils.py BaseTunerLayer.get_base_layer)."""
    while not isinstance(m, FSDPModule) and hasattr(m, "base_layer"):
        m = m.base_layer
    return m


def groups(model):
    """The FSDP modules by fsdpsim's group name."""
    return {'root': fsdp_module(model)}


def zero_grad(model, opt, shards):
    if opt is not None:
        opt.zero_grad(set_to_none=True)
    model.zero_grad(set_to_none=True)
    for p in shards.values():
        p.grad = None


def train_step(model, opt, shards, x):
    zero_grad(model, opt, shards)
    model(x).float().sum().backward()
    if opt is not None:
        opt.step()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        print(", ".join(f"{p} {version(p)}" for p in ("torch", "peft", "accelerate", "transformers")) +
              f", Python {sys.version.split()[0]}", flush=True)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = get_peft_model(Net(), LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False), adapter_name='default')
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1 + 1000003 * rank))
    shards, opt = shard(model, mesh)
    at = None
    try:
        at = 'step 1 (add_adapter late)'
        model.add_adapter('late', LoraConfig(r=4, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False))
        at = 'step 2 (set_adapter late)'
        model.set_adapter('late')
        at = 'step 3 (new_optimizer)'
        opt = make_optimizer(model, shards)
        at = None  # step 4, where the finding shows: checked below
        runs = True
        snap = before(model, shards) if runs else None
        status, message = "ok", ""
        try:
            if runs:
                train_step(model, opt, shards, x)
        except Exception as e:
            status, message = status_of(e)
        code, got = check(model, shards, snap, status, message, None)
    except Exception as e:
        code, got = DIFFERENT, f"{at} raised {type(e).__name__}: {e}"
    finish(code, got)


def finish(code, got):
    """Every rank exits with the same code: 2 if any rank failed differently, else the finding rank's."""
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, (code, got))
    codes = [c for c, _ in results]
    code = DIFFERENT if DIFFERENT in codes else max(codes)
    if dist.get_rank() == 0:
        shown = next((g for c, g in results if c == code), results[0][1])
        print(f"expected: {EXPECTED}", flush=True)
        print(f"got: {shown}", flush=True)
        print(f"result: {RESULT[code]} (exit {code})", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    leave(code)


def leave(code):
    """Exit with the verdict, skipping interpreter teardown: with FSDP2 and PEFT loaded it sometimes
    aborts after the verdict is printed (terminate called without an active exception)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
