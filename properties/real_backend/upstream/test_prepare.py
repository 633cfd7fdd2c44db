"""Tests of the upstream backend's `prepare` op (fsdpsim_upstream/prepare.py): that it goes
through accelerate's own Accelerator.prepare with an FSDP2 plugin where the scenario lets it,
and the measured reasons it does not elsewhere. Two gloo ranks spawned on CPU, each building a
Session; `.venv/bin/python properties/real_backend/upstream/test_prepare.py` runs them by hand."""
import json
import os
import socket
import sys
import tempfile
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

SCEN = """world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=false
fully_shard root reshard_after_forward={raf}
optimizer trainable
{extra}---
forward
"""


def rank_main(rank, world, text, out):
    """One rank: the raw Accelerator's choice on CPU, then a Session built with a spy on
    Accelerator.prepare; what it saw is written to out-<rank>.json."""
    import torch
    import torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer
    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.device_mesh import init_device_mesh

    from fsdpsim_upstream import prepare, profiles, seqfile
    from fsdpsim_upstream.session import Session

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))  # as pool.py starts a rank
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = {}
    # accelerate's own choice on CPU with an FSDP2 plugin, before the harness sets the state
    raw = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    res["raw_type"] = str(raw.state.distributed_type)
    seen = []
    real = Accelerator.prepare

    def spy(self, *args, **kwargs):
        from torch.distributed.fsdp import FSDPModule
        # which modules were FSDPModules before accelerate's prepare ran: none, when accelerate shards them all
        res.setdefault("sharded_before", [n for n, m in args[0].named_modules() if isinstance(m, FSDPModule)])
        got = real(self, *args, **kwargs)
        seen.append(got)
        return got

    Accelerator.prepare = spy
    scen, ops = seqfile.parse(text)
    sess = Session(scen, ops, rank, world, init_device_mesh("cpu", (world,)),
                   profiles.resolve(scen.profile, scen.sets), tempfile.mkdtemp(dir=out))  # removed with `out` by run()
    sess.build()
    res["prepared_by"] = sess.prepared_by
    res["calls"] = len(seen)
    if seen:
        res["model_is_returned"] = sess.pm is seen[0][0]
        res["opt_is_returned"] = sess.opt is seen[0][1]
    res["accelerated_optimizer"] = isinstance(sess.opt, AcceleratedOptimizer)
    res["opt_names"] = sess.opt_names
    registered = {id(p) for p in sess.pm.parameters()}
    res["opt_registered"] = all(id(p) in registered for p in sess.opt.param_groups[0]["params"])
    res["opt_distinct"] = len({id(p) for p in sess.opt.param_groups[0]["params"]}) == len(sess.opt_names)
    lin0 = sess.module_of("lin0")
    res["lin0_own_unit"] = lin0._get_fsdp_state() is not sess.pm._get_fsdp_state()
    sess.run_op(ops[0])  # a forward: FSDP's lazy init settles the root's reshard_after_forward
    root_group = sess.pm._get_fsdp_state()._fsdp_param_group  # None: every parameter is in a child's unit
    res["root_reshards"] = root_group is not None and root_group.post_forward_mesh_info is not None
    res["lin0_reshards"] = lin0._get_fsdp_state()._fsdp_param_group.post_forward_mesh_info is not None
    # each layer's unit after the forward: its state's index among the layers' (one per unit), whether it holds
    # parameters and reshards after forward, and the class the layer's module (the wrapper under `checkpoint`) has
    states, units = [], {}
    for name in (l.name for l in scen.layers):
        mod = sess.module_of(name)
        state = mod._get_fsdp_state() if hasattr(mod, "_get_fsdp_state") else None
        if state is not None and state not in states:
            states.append(state)
        group = state._fsdp_param_group if state is not None else None
        units[name] = [states.index(state) if state is not None else None, type(mod).__name__,
                       group is not None, group is not None and group.post_forward_mesh_info is not None]
    res["units"] = units
    res["net_class"] = type(sess.pm.base_model.model).__name__
    res["net_roles"] = [r for r in ("get_input_embeddings", "get_output_embeddings", "base_model_prefix")
                        if hasattr(sess.pm.base_model.model, r)]
    try:  # under FSDP2 accelerate takes no model without its optimizer (the reason `new_optimizer` is direct)
        prepare.accelerator().prepare(torch.nn.Linear(2, 2))
        res["model_alone"] = "ok"
    except ValueError as e:
        res["model_alone"] = str(e)
    with open(os.path.join(out, f"out-{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


def rank_meta_probe(rank, world, text, out):
    """accelerate's own ram-efficient path on a PEFT model whose ranks > 0 hold meta tensors
    (as the session's `loading ram_efficient` builds them; transformers 4.x leaves a quantized
    model there): which parameters the optimizer it returns holds, built before prepare as
    transformers' Trainer builds it under FSDP2 (trainer.py::_prepare_for_training). With
    text "empty" ranks > 0 hold CPU placeholders instead: transformers 4.x's non-quantized
    ram-efficient load (modeling_utils.py::_load_pretrained_model, torch.empty for each meta
    parameter). Writes out-<rank>.json like rank_main."""
    import torch
    import torch.distributed as dist
    from accelerate.utils import FullyShardedDataParallelPlugin
    from peft import LoraConfig, get_peft_model

    from fsdpsim_upstream import prepare

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    with torch.device("meta" if rank > 0 else "cpu"):
        net = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4))
    if rank > 0 and text == "empty":
        net = net.to_empty(device="cpu")
    # a random lora_B too: rank 1's own init (its RNG drew no base weights) differs from rank 0's until the broadcast
    model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=["0", "2"], init_lora_weights=False))
    acc = prepare.accelerator()
    acc.state.fsdp_plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=True)
    params = [p for p in model.parameters() if p.requires_grad]
    model, opt = acc.prepare(model, torch.optim.AdamW(params, lr=1e-2))
    held = opt.param_groups[0]["params"]
    registered = {id(p): n for n, p in model.named_parameters()}
    # every rank's view of rank 0's weights after the broadcast: the full tensors, gathered
    full = {n: p.full_tensor().sum().item() for n, p in model.named_parameters()}
    with open(os.path.join(out, f"out-{rank}.json"), "w") as f:
        json.dump({"held": len(held), "distinct": len({id(p) for p in held}),
                   "held_names": [registered.get(id(p), "?") for p in held], "full": full}, f)
    dist.barrier()
    dist.destroy_process_group()


def run(text, world=2, target=rank_main):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="fsdpsim-prepare-") as out:
        mp.spawn(target, args=(world, text, out), nprocs=world)
        res = []
        for r in range(world):
            with open(os.path.join(out, f"out-{r}.json")) as f:
                res.append(json.load(f))
    return res


class PrepareTest(unittest.TestCase):
    def test_prepare_goes_through_accelerate(self):
        for res in run(SCEN.format(raf="true", extra="")):
            # measured: on CPU accelerate settles on DDP, whatever the plugin (docs/design/upstream-backend.md's reason
            # for setting the state; red the day accelerate picks FSDP on CPU by itself)
            self.assertEqual(res["raw_type"], "DistributedType.MULTI_CPU")
            self.assertEqual(res["prepared_by"], "accelerate")
            self.assertEqual(res["calls"], 1)
            self.assertTrue(res["model_is_returned"])
            self.assertTrue(res["opt_is_returned"])
            self.assertTrue(res["accelerated_optimizer"])
            self.assertTrue(res["opt_registered"])
            self.assertTrue(res["opt_distinct"])
            self.assertTrue(res["root_reshards"])  # the scenario's root =true, set after accelerate's None
            self.assertEqual(res["sharded_before"], [])  # accelerate's auto-wrap shards the child, not the harness
            self.assertTrue(res["lin0_own_unit"])
            self.assertFalse(res["lin0_reshards"])  # the child's =false: the plugin's reshard_after_forward
            self.assertIn("a model and optimizer must be passed together", res["model_alone"])

    def test_root_none_is_accelerates_own(self):
        for res in run(SCEN.format(raf="none", extra="")):
            self.assertEqual(res["prepared_by"], "accelerate")
            self.assertFalse(res["root_reshards"])  # torch's None resolves to False at the root

    def test_child_with_an_empty_shard_goes_through_accelerate(self):
        """At world 3 lin1's 2-row weight leaves rank 2 no row: sharded by hand before prepare, its empty
        local tensor's data_ptr() 0 mixed the optimizer up; sharded by accelerate itself, every parameter
        is still whole when _prepare_fsdp2 maps them, and each rank's optimizer holds distinct shards."""
        text = SCEN.format(raf="false", extra="").replace("world 2", "world 3").replace(
            "fully_shard lin0 reshard_after_forward=false", "fully_shard lin0 reshard_after_forward=none\n"
            "fully_shard lin1 reshard_after_forward=true")
        for res in run(text, world=3):
            self.assertEqual(res["prepared_by"], "accelerate")
            self.assertEqual(res["sharded_before"], [])
            self.assertTrue(res["opt_registered"])
            self.assertTrue(res["opt_distinct"])
            self.assertTrue(res["lin0_reshards"])  # =none below the root: torch's True

    def test_grouped_child_is_accelerates_tail(self):
        """A group [a, b] is the one grouped unit fsdp2_prepare_model makes, its tail [final norm,
        output embedding]: one unit for both layers, sharded by accelerate (red while `grouped`
        took the direct path); the tail's reshard_after_forward=False gives way to the scenario's,
        and the Net and the layers have their own classes again afterwards."""
        text = SCEN.format(raf="none", extra="").replace(
            "layer lin1 20 2", "layer lin1 20 6\nlayer lin2 6 2").replace(
            "fully_shard lin0 reshard_after_forward=false",
            "fully_shard lin0 reshard_after_forward=false\nfully_shard lin2,lin1 reshard_after_forward=true").replace(
            "targets=lin0,lin1", "targets=lin0,lin1,lin2")
        for res in run(text):
            self.assertEqual(res["prepared_by"], "accelerate")
            self.assertEqual(res["sharded_before"], [])
            self.assertTrue(res["opt_registered"])
            self.assertEqual(res["units"], {"lin0": [0, "FSDPLinear", True, False],
                                            "lin1": [1, "FSDPLinear", True, True],
                                            "lin2": [1, "FSDPLinear", True, True]})
            self.assertEqual((res["net_class"], res["net_roles"]), ("Net", []))

    def test_checkpointed_children_are_accelerates_embedding_and_tail(self):
        """Two checkpointed layers sharded as children: the first is the input embedding's unit, the
        second the tail alone, each unit on the CheckpointWrapper as the scenario has it (accelerate's
        auto-wrap would shard the module inside and leave the wrapper an empty unit); red while
        `checkpoint_child` took the direct path."""
        text = SCEN.format(raf="false", extra="checkpoint lin0,lin1\n").replace(
            "fully_shard lin0 reshard_after_forward=false",
            "fully_shard lin0 reshard_after_forward=none\nfully_shard lin1 reshard_after_forward=none")
        for res in run(text):
            self.assertEqual(res["prepared_by"], "accelerate")
            self.assertTrue(res["opt_registered"])
            self.assertTrue(res["opt_distinct"])
            self.assertEqual(res["units"], {"lin0": [0, "FSDPCheckpointWrapper", True, True],
                                            "lin1": [1, "FSDPCheckpointWrapper", True, True]})
            self.assertEqual((res["net_class"], res["net_roles"]), ("Net", []))

    def test_ram_efficient_loading_goes_through_accelerate(self):
        """Meta ranks > 0 go through accelerate as a QLoRA user's do: rank 1's optimizer holds the
        last meta parameter once per entry (accelerator.py::Accelerator._prepare_fsdp2's data_ptr
        map), and the session names what it holds (red when the names were the entries' own)."""
        rank0, rank1 = run(SCEN.format(raf="true", extra="loading ram_efficient\n"))
        for res in (rank0, rank1):
            self.assertEqual(res["prepared_by"], "accelerate")
            self.assertEqual(res["calls"], 1)
            self.assertTrue(res["accelerated_optimizer"])
            self.assertTrue(res["opt_registered"])
        self.assertEqual(rank0["opt_names"], ["lin0.lora_A.default", "lin0.lora_B.default",
                                              "lin1.lora_A.default", "lin1.lora_B.default"])
        self.assertTrue(rank0["opt_distinct"])
        self.assertEqual(rank1["opt_names"], ["lin1.lora_B.default"] * 4)
        self.assertFalse(rank1["opt_distinct"])

    def test_accelerate_on_meta_ranks_mixes_the_optimizer_up(self):
        """What `loading ram_efficient` gets from accelerate, which the model and the C++ backend
        mirror: every meta parameter's data_ptr() is 0, so _prepare_fsdp2's map gives rank 1's
        optimizer one parameter four times (red the day accelerate maps them apart: then the
        mirrors go)."""
        rank0, rank1 = run("", target=rank_meta_probe)
        self.assertEqual((rank0["held"], rank0["distinct"]), (4, 4))
        self.assertEqual((rank1["held"], rank1["distinct"]), (4, 1))
        # the last meta parameter in named_parameters() order: the map's one key 0 was written last for it
        self.assertEqual(rank1["held_names"], ["base_model.model.2.lora_B.default.weight"] * 4)

    def test_accelerate_on_cpu_placeholder_ranks_maps_the_optimizer(self):
        """The non-quantized user's flow: ranks > 0 hold CPU placeholders, so every parameter's
        data_ptr() is its own and _prepare_fsdp2 maps each optimizer entry to its own sharded
        parameter, in the same order on every rank; the broadcast leaves rank 0's weights
        everywhere (red if the placeholders were meta: one parameter four times)."""
        rank0, rank1 = run("empty", target=rank_meta_probe)
        for res in (rank0, rank1):
            self.assertEqual((res["held"], res["distinct"]), (4, 4))
            self.assertNotIn("?", res["held_names"])
        self.assertEqual(rank0["held_names"], rank1["held_names"])
        self.assertEqual(rank0["full"], rank1["full"])


class DeterministicEmptyTest(unittest.TestCase):
    """A ram-efficient prepare's uninitialized memory (the broadcast receivers' torch.empty, the
    scatter's torch.empty_like) holds torch's deterministic fill, not what the process ran before,
    and the mode is restored after it (prepare.py::deterministic_empty)."""

    def test_empty_is_filled_inside_and_mode_restored(self):
        import torch
        from fsdpsim_upstream.prepare import deterministic_empty
        for _ in range(3):
            torch.full((64,), 7.0)  # a freed block of 7s the allocator may hand back
            with deterministic_empty(True):
                self.assertTrue(torch.isnan(torch.empty(64)).all())
                self.assertTrue(torch.isnan(torch.empty_like(torch.ones(8, dtype=torch.bfloat16))).all())
                self.assertTrue((torch.empty(8, dtype=torch.uint8) == 255).all())
        self.assertFalse(torch.are_deterministic_algorithms_enabled())
        with deterministic_empty(False):
            self.assertFalse(torch.are_deterministic_algorithms_enabled())


class ExportTest(unittest.TestCase):
    """`export --python` writes the torch calls accelerate's fsdp2_prepare_model makes, never a forced
    AcceleratorState (accelerate 1.15 picks FSDP for multi-device distributed types only, state.py)."""

    def test_script_shards_as_accelerate_does_without_forcing_its_state(self):
        from fsdpsim_upstream.export import export
        script = export(SCEN.format(raf="true", extra=""))
        self.assertIn("fully_shard(model, mesh=mesh, reshard_after_forward=True)", script)
        self.assertNotIn("distributed_type", script)
        self.assertNotIn("Accelerator(", script)

    def test_ram_efficient_script_stays_direct(self):
        from fsdpsim_upstream.export import export
        script = export(SCEN.format(raf="true", extra="loading ram_efficient\n"))
        self.assertNotIn("accelerator()", script)
        self.assertIn("fsdp2_load_full_state_dict(", script)


if __name__ == "__main__":
    unittest.main()
