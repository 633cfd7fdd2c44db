"""Probe for hazard B7 (docs/design/known-limits.md, "Beyond the seeds"): activation checkpointing
under FSDP2 with a PEFT flag change between forward and backward.

The backend runs the same setup from a `checkpoint LAYER` scenario line
(session.py::Session.apply_checkpointing); this probe runs the real libraries
directly on seed 000's topology (lin0 10x20, lin1 20x2, adapters default and
other r=8 on both, world 2, gloo, CPU), with lin0 wrapped as accelerate's fsdp2_apply_ac wraps a layer
(accelerate/utils/fsdp_utils.py::fsdp2_apply_ac: checkpoint_wrapper(layer,
preserve_rng_state=False) before fully_shard), then fully_shard(lin0), fully_shard(root).

    python b7_activation_checkpoint.py CASE RAF [R_OTHER] [nockpt]

CASE: none | set_adapter | disable | merge (the flag change made between
`loss = model(x)` and `loss.backward()`); RAF: true | false. Prints, from rank 0,
the backward's status and which LoRA parameters hold a grad. Each case needs a
fresh pair of processes: after a raising backward the ranks are out of step.
"""
import os
import subprocess
import sys


def rank_main(case, raf, r_other, ckpt):
    import torch
    import torch.nn as nn
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from peft import LoraConfig, get_peft_model

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin0, self.lin1 = nn.Linear(10, 20), nn.Linear(20, 2)

        def forward(self, x):
            return self.lin1(torch.relu(self.lin0(x)))

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    cfg = dict(lora_alpha=8, target_modules=["lin0", "lin1"], init_lora_weights=False)
    pm = get_peft_model(Net(), LoraConfig(r=8, **cfg), adapter_name="default")
    pm.add_adapter("other", LoraConfig(r=r_other, **cfg))
    base = pm.base_model.model
    if ckpt:
        base.lin0 = checkpoint_wrapper(base.lin0, preserve_rng_state=False)
    fully_shard(base.lin0, mesh=mesh, reshard_after_forward=raf)
    fully_shard(pm, mesh=mesh, reshard_after_forward=raf)
    x = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
    held = None  # the disable_adapter() context, kept alive: a dropped generator runs its exit
    try:
        loss = pm(x).sum()
        if case == "set_adapter":
            pm.base_model.set_adapter("other")
        elif case == "disable":
            held = pm.disable_adapter()
            held.__enter__()
        elif case == "merge":
            pm.merge_adapter()
        loss.backward()
        status = "ok"
    except Exception as e:  # the observation is the exception's class and first lines
        status = f"{type(e).__name__}: " + " ".join(str(e).split("\n")[:3])
    grads = sorted(n.replace("base_model.model.", "").replace("_checkpoint_wrapped_module.", "")
                   for n, p in pm.named_parameters() if "lora" in n and p.grad is not None)
    if rank == 0:
        print(f"{case} raf={raf} r_other={r_other} ckpt={ckpt}: {status}; grads={grads}", flush=True)


def main():
    if "RANK" in os.environ:
        a = sys.argv[1:]
        rank_main(a[0], a[1] == "true", int(a[2]), a[3] == "1")
        return
    case, raf = sys.argv[1], sys.argv[2]
    r_other = sys.argv[3] if len(sys.argv) > 3 else "8"
    ckpt = "0" if "nockpt" in sys.argv else "1"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29571"))
    procs = [subprocess.Popen([sys.executable, __file__, case, raf, r_other, ckpt], env=dict(env, RANK=str(r)))
             for r in range(2)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
