"""S1 under FSDP2 + PEFT LoRA at step 2 (train_step): expected gradients on {default}, got no_grad_fn

fsdpsim finding: S1 step 2 rank 0: expected gradients on {default}, got no_grad_fn; lin0.lora_A.default: S.requires_grad=false, U.requires_grad=false, group root SHARDED
Class signature: S1:no_grad_fn | load_adapter:frozen(S) *(S) | experts=3 groups=2 deferred
Expected: step 2 (train_step) puts gradients on the LoRA parameters of {default} and of no other adapter

Sequence: 2 ops at world 1 (CPU, gloo): load_adapter third frozen; train_step
Confirmed on: torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, transformers 5.24.0, Python 3.11.7; CPU, gloo, world 1.
Run: torchrun --nproc_per_node=1 repro.py
Exit: 1 the bug reproduces, 0 it does not (fixed), 2 it fails differently (an unexpected
exception, or the check violated another way); every rank exits with the same code, and
torchrun reports a rank's non-zero code as its own exit 1 (the code is in its summary).
Exported by fsdpsim export --python from docs/findings/half-added-adapter.seq.
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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

REPRODUCED, FIXED, DIFFERENT = 1, 0, 2
RESULT = {1: "the bug reproduces", 0: "it does not reproduce", 2: "it fails differently"}
EXPECTED = 'step 2 (train_step) puts gradients on the LoRA parameters of {default} and of no other adapter'
# each adapter parameter (fsdpsim's name) -> its adapter, from the scenario's declarations
ADAPTER_OF = {'lin0.lora_A.default': 'default', 'lin0.lora_B.default': 'default', 'lin0.lora_A.other': 'other', 'lin0.lora_B.other': 'other', 'lin0.lora_A.third': 'third', 'lin0.lora_B.third': 'third', 'lin1.lora_A.other': 'other', 'lin1.lora_B.other': 'other', 'lin1.lora_A.third': 'third', 'lin1.lora_B.third': 'third'}
RECORDED_STATUS = 'no_grad_fn'
WANT = ['default']
RECORDED_GOT = 'no_grad_fn'


class Experts(nn.Module):
    """A mixture-of-experts weight (E, in, out), marked transposed for PEFT's ParamWrapper."""

    def __init__(self, experts, fan_in, fan_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, fan_in, fan_out) / fan_in ** 0.5)
        self.is_transposed = True

    def forward(self, x):
        return torch.einsum("bi,eio->bo", x, self.weight) / self.weight.shape[0]


class Net(nn.Module):
    """lin0, lin1 in order, ReLU between them."""

    def __init__(self):
        super().__init__()
        self.lin0 = nn.Linear(10, 6)
        self.lin1 = Experts(3, 6, 2)

    def forward(self, x):
        return self.lin1(torch.relu(self.lin0(x)))


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


def expect_status(e, status):
    """An op the recorded run saw raise: the same class again, or the script fails differently."""
    if status_of(e)[0] != status:
        raise e


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
    return {n: None if p.grad is None else local(p.grad).clone() for n, p in adapter_params(model, shards)}


def check(model, shards, snap, status, message, result):
    """The adapters whose LoRA parameters received a gradient during the op."""
    if status != "ok":
        return (REPRODUCED if status == RECORDED_GOT else DIFFERENT), f"{status}: {message}"
    got = sorted({ADAPTER_OF[n] for n, p in adapter_params(model, shards)
                  if p.grad is not None and (snap[n] is None or not torch.equal(local(p.grad), snap[n]))})
    code = FIXED if got == WANT else REPRODUCED if got == RECORDED_GOT else DIFFERENT
    return code, f"gradients on {{{','.join(got)}}}"


def shard(model, mesh):
    """The children's fully_shard as the scenario says, then accelerate's Accelerator.prepare with
    an FSDP2 plugin: the root's fully_shard, the optimizer switched to the shards and wrapped.
    The shards the model registers and the optimizer."""
    fully_shard(model.base_model.model.lin1, mesh=mesh, reshard_after_forward=True)
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
    return {'lin1': fsdp_module(model.base_model.model.lin1), 'root': fsdp_module(model)}


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
    tmp = tempfile.mkdtemp()
    MADE.append(tmp)
    torch.manual_seed(0)
    model = get_peft_model(Net(), LoraConfig(r=3, lora_alpha=3, target_modules=['lin0'], init_lora_weights=False), adapter_name='default')
    model.add_adapter('other', LoraConfig(r=4, lora_alpha=4, target_modules=['lin0'], target_parameters=['lin1.weight'], init_lora_weights=False))
    x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
    shards, opt = shard(model, mesh)
    at = None
    try:
        at = 'step 1 (load_adapter third frozen)'
        try:  # the recorded run saw this op raise value_error too
            torch.manual_seed(9)
            src = get_peft_model(Net(), LoraConfig(r=2, lora_alpha=2, target_modules=['lin0'], target_parameters=['lin1.weight'], init_lora_weights=False), adapter_name='third')
            src.save_pretrained(f'{tmp}/src{rank}', selected_adapters=['third'])
            model.load_adapter(f'{tmp}/src{rank}/third', adapter_name='third', is_trainable=False)
        except Exception as e:
            expect_status(e, 'value_error')
        at = None  # step 2, where the finding shows: checked below
        runs = True
        snap = before(model, shards) if runs else None
        status, message = "ok", ""
        try:
            if runs:
                train_step(model, opt, shards, x)
        except Exception as e:
            status, message = status_of(e)
        code, got = check(model, shards, snap, status, message, None) if runs else (FIXED, "(not run on this rank)")
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
