"""S6 under FSDP2 + PEFT LoRA at step 3 (load_adapters): load_adapters raised key_error: KeyError: 'default'

fsdpsim finding: S6 step 3 rank 0: load_adapters raised key_error: KeyError: 'default'
Class signature: S6:key_error | save_adapters(S) delete_adapter(S) *(S)
Expected: step 3 (load_adapters): set_peft_model_state_dict of each saved adapter's state dict runs without an exception

Sequence: 3 ops at world 1 (CPU, gloo): save_adapters; delete_adapter default; load_adapters
Fix applied in this script (fsdpsim switch adapter_save_gather=on): the lines marked `# fix`.
Confirmed on: torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, transformers 5.24.0, Python 3.11.7; CPU, gloo, world 1.
Run: torchrun --nproc_per_node=1 repro.py
Exit: 1 the bug reproduces, 0 it does not (fixed), 2 it fails differently (an unexpected
exception, or the check violated another way); every rank exits with the same code, and
torchrun reports a rank's non-zero code as its own exit 1 (the code is in its summary).
Exported by fsdpsim export --python from docs/findings/raises-in.load_adapters.seq.
"""
import os
import sys
import shutil
import tempfile
from importlib.metadata import version

import torch
import torch.distributed as dist
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

REPRODUCED, FIXED, DIFFERENT = 1, 0, 2
RESULT = {1: "the bug reproduces", 0: "it does not reproduce", 2: "it fails differently"}
EXPECTED = "step 3 (load_adapters): set_peft_model_state_dict of each saved adapter's state dict runs without an exception"
# each adapter parameter (fsdpsim's name) -> its adapter, from the scenario's declarations
ADAPTER_OF = {'lin0.lora_A.default': 'default', 'lin0.lora_B.default': 'default'}
RECORDED_STATUS = 'key_error'
RECORDED_MESSAGE = "'default'"


class Net(nn.Module):
    """lin0 in order, ReLU between them."""

    def __init__(self):
        super().__init__()
        self.lin0 = nn.Linear(10, 20)

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


def local(t):
    return t.to_local() if isinstance(t, DTensor) else t


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


def check(model, shards, snap, status, message, result):
    if status == "ok":
        return FIXED, "it ran without an exception"
    code = REPRODUCED if status == RECORDED_STATUS and message.startswith(RECORDED_MESSAGE) else DIFFERENT
    return code, f"{status}: {message}"


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


def groups(model):
    """The FSDP modules by fsdpsim's group name."""
    return {'root': model}


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        print(", ".join(f"{p} {version(p)}" for p in ("torch", "peft", "accelerate", "transformers")) +
              f", Python {sys.version.split()[0]}", flush=True)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    tmp = [tempfile.mkdtemp() if rank == 0 else None]  # one directory every rank reads
    dist.broadcast_object_list(tmp, src=0)
    tmp = tmp[0]
    if rank == 0:
        MADE.append(tmp)
    torch.manual_seed(0)
    model = get_peft_model(Net(), LoraConfig(r=8, lora_alpha=8, target_modules=['lin0'], init_lora_weights=False), adapter_name='default')
    x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
    shards, opt = shard(model, mesh)
    at = None
    try:
        at = 'step 1 (save_adapters)'
        saved = {a: get_peft_model_state_dict(model, adapter_name=a) for a in model.peft_config}
        # fix (gather every DTensor the adapters' state dict holds before it is written)
        saved = {a: {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in sd.items()} for a, sd in saved.items()}
        if rank == 0:  # what a checkpoint writer gets: this rank's tensors
            torch.save({a: {k: local(v).detach().clone() for k, v in sd.items()} for a, sd in saved.items()}, f'{tmp}/adapters-1.pt')
        at = 'step 2 (delete_adapter default)'
        model.delete_adapter('default')
        at = None  # step 3, where the finding shows: checked below
        runs = True
        snap = before(model, shards) if runs else None
        status, message = "ok", ""
        saved = deltas = None
        try:
            if runs:
                dist.barrier()  # rank 0 has written it
                loaded = torch.load(f'{tmp}/adapters-1.pt')
                for a, sd in loaded.items():
                    set_peft_model_state_dict(model, sd, adapter_name=a)
        except Exception as e:
            status, message = status_of(e)
        code, got = check(model, shards, snap, status, message, saved) if runs else (FIXED, "(not run on this rank)")
    except Exception as e:
        code, got = DIFFERENT, f"{at} raised {type(e).__name__}: {e}"
    finish(code, got)


def finish(code, got):
    """Every rank exits with the same code: 2 if any rank failed differently, else the finding rank's."""
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, (code, got))
    codes = [c for c, _ in results]
    code = DIFFERENT if DIFFERENT in codes else results[0][0]
    if dist.get_rank() == 0:
        shown = next((g for c, g in results if c == code), results[0][1])
        print(f"expected: {EXPECTED}", flush=True)
        print(f"got: {shown}", flush=True)
        print(f"result: {RESULT[code]} (exit {code})", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    leave(code)


MADE = []  # the temporary directories this rank made: leave() removes them


def leave(code):
    """Exit with the verdict, skipping interpreter teardown: with FSDP2 and PEFT loaded it sometimes
    aborts after the verdict is printed (terminate called without an active exception)."""
    for d in MADE:
        shutil.rmtree(d, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
