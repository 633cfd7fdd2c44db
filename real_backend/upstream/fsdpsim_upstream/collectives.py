"""Records the collectives FSDP2, DTensor and accelerate actually issue, and
announces each to the coordinator before it is issued: the ones the peers issued
alike go at once, the others run on gloo as issued under a short timeout, and
their outcome goes back to the coordinator, which reads the verdict from it (probe.py).

The wrappers replace attributes of `torch.distributed` (FSDP2 calls
`dist.all_gather_single` / `dist.reduce_scatter_single` through the module,
torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py::DefaultAllGather /
DefaultReduceScatter; accelerate calls `dist.broadcast` in
utils/fsdp_utils.py::fsdp2_load_full_state_dict). Which FSDP group and which
parameters a collective packs comes from FSDPParamGroup's own calls to
`foreach_all_gather` / `foreach_reduce` (_fsdp_param_group.py), wrapped to
note their argument lists."""
import contextlib
import threading

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard import _fsdp_param_group
from torch.distributed.tensor import DTensor

from .timing import PHASES

DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.uint8: "uint8"}


class CollectiveAbort(Exception):
    """Raised inside an op when the peers did not issue the same collective."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class Recorder:
    """One per rank process. `check` is the channel's pre-collective check
    (None at world 1); `names` maps an FSDPParam or a tensor to its fsdpsim name."""

    def __init__(self):
        self.log = []  # the current op's collectives, as observation dicts
        self.check = None
        self.step = 0
        self.context = threading.local()
        self.group_name = {}  # id(FSDPParamGroup) -> group name
        self.param_name = {}  # id(FSDPParam) -> parameter name
        self.broadcast_keys = None  # the state-dict keys accelerate broadcasts, in this rank's order
        self.broadcast_index = 0
        # ids of the FSDPParams foreach_reduce wrote a gradient into since the op began: what
        # `grads` reports for managed parameters (a version counter cannot tell, since the
        # shards' grads are views of one reduce output whose counter every in-place add bumps)
        self.reduced = set()
        # set by `check` when the coordinator lets through a collective the ranks issued
        # differently (probe.py): {"id", "timeout_ms"}; `report(id, outcome)` tells the
        # coordinator how it ended here and returns on its `go` (raises CollectiveAbort else)
        self.probe = None
        self.report = None
        # `file_ready(n)` (ranks > 0 of a pool): asks the coordinator whether rank 0's n-th saved
        # adapter file is there, answered once rank 0 wrote it or never will (pool.py::answer_files)
        self.file_ready = None
        self.world = 1
        self.wire_dtypes = False  # the scenario has a mixed_precision policy (rank.py main)

    def issue(self, op, group, count, dtype, parts, dtensor=False):
        rec = {"op": op, "group": group, "count": int(count), "parts": parts}
        # a broadcast's dtype; under a mixed_precision policy every wire dtype (the model's
        # observer.cpp Observer::collective_into keeps the same ones)
        if op == "broadcast" or (self.wire_dtypes and dtype != "fp32"):
            rec["dtype"] = dtype
        self.log.append(rec)
        if self.check is not None:
            # the dtype goes to the pairing check, not the record: DTensor pairs by op and size over
            # one process group, and gloo aborts the rank when the peers' byte counts differ
            self.check(rec, self.step, dtensor, dtype)

    def run_issued(self, call, sent=None, output=None):
        """Runs the collective `call` issues. One the coordinator let through unpaired runs under
        its short gloo timeout and is waited for here (an async work, a functional collective's
        tensor): its outcome goes to the coordinator, what an all-gather delivered included."""
        probe, self.probe = self.probe, None
        if probe is None or self.report is None:
            with PHASES.timed("gloo"):
                return call()
        set_timeout(probe.get("timeout_ms"))
        try:
            with PHASES.timed("gloo"):
                result = call()
                if hasattr(result, "wait"):
                    result.wait()
                elif isinstance(result, torch.Tensor):
                    torch.ops._c10d_functional.wait_tensor(result)
        except Exception as e:  # gloo's own words: a timeout, a peer's closed connection
            text = str(e).strip().splitlines()
            self.report(probe["id"], {"how": "raised", "text": f"{type(e).__name__}: {text[0] if text else ''}"})
            raise  # not reached: the coordinator answers a raise with its verdict
        finally:
            set_timeout(None)
        done = {"how": "completed"}
        got = output if output is not None else result if isinstance(result, torch.Tensor) else None
        if sent is not None and got is not None:
            done.update(sent=fingerprint(sent), got=[fingerprint(c) for c in got.reshape(self.world, -1)])
        self.report(probe["id"], done)
        return result

    def fsdp_context(self):
        return getattr(self.context, "fsdp", None)

    @contextlib.contextmanager
    def noting(self, value):
        prev = getattr(self.context, "fsdp", None)
        self.context.fsdp = value
        try:
            yield
        finally:
            self.context.fsdp = prev


REC = Recorder()


def set_timeout(ms):
    """gloo's timeout for the next collectives on every process group (ProcessGroupGloo reads it
    when it creates a collective's work, ProcessGroupGloo.cpp::ProcessGroupGloo::setTimeout);
    None: torch's default again."""
    from datetime import timedelta
    from torch.distributed import distributed_c10d as c10d
    t = timedelta(milliseconds=ms) if ms else c10d.default_pg_timeout
    for pg in list(c10d._world.pg_map):
        c10d._set_pg_timeout(t, pg)


def fingerprint(t):
    """A digest of a tensor's bytes (any dtype)."""
    import hashlib
    return hashlib.blake2b(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes(),
                           digest_size=8).hexdigest()


def _parts(fsdp_params):
    out = {}
    for fp in fsdp_params:
        out[REC.param_name.get(id(fp), "?")] = int(fp.padded_sharded_param_size.numel())
    return out


def _group_of(fsdp_params):
    for fp in fsdp_params:
        g = REC.group_name.get(id(fp))
        if g is not None:
            return g
    return "?"


def local_of(t):
    """A DTensor's local shard; a plain tensor itself."""
    return t._local_tensor if isinstance(t, DTensor) else t


def _local_copy(g):
    return None if g is None else local_of(g).detach().clone()


def _written(now, before, values):
    """A shard's gradient was written: another object, or the same one with other values."""
    if now is None:
        return False
    if now is not before:
        return True
    return not torch.equal(local_of(now), values)


def install():
    orig_ag = dist.all_gather_single
    orig_rs = dist.reduce_scatter_single
    orig_bc = dist.broadcast
    orig_foreach_ag = _fsdp_param_group.foreach_all_gather
    orig_foreach_rs = _fsdp_param_group.foreach_reduce

    def foreach_all_gather(fsdp_params, *a, **k):
        with REC.noting(("all_gather", list(fsdp_params))):
            return orig_foreach_ag(fsdp_params, *a, **k)

    def foreach_reduce(fsdp_params, *a, **k):
        before = [(fp, fp.sharded_param.grad, _local_copy(fp.sharded_param.grad)) for fp in fsdp_params]
        with REC.noting(("reduce_scatter", list(fsdp_params))):
            try:
                out = orig_foreach_rs(fsdp_params, *a, **k)
            except BaseException:
                # it raised before the gradients (its dtype check) or part way through them (the
                # grad setter refusing another dtype): only the shards whose gradient it wrote
                REC.reduced.update(id(fp) for fp, g, v in before if _written(fp.sharded_param.grad, g, v))
                raise
        REC.reduced.update(id(p) for p in fsdp_params)
        return out

    def all_gather_single(output, input, *a, **k):
        ctx = REC.fsdp_context()
        params = ctx[1] if ctx and ctx[0] == "all_gather" else []
        REC.issue("all_gather", _group_of(params), input.numel(), DTYPES.get(input.dtype, str(input.dtype)),
                  _parts(params))
        return REC.run_issued(lambda: orig_ag(output, input, *a, **k), input, output)

    def reduce_scatter_single(output, input, *a, **k):
        ctx = REC.fsdp_context()
        params = ctx[1] if ctx and ctx[0] == "reduce_scatter" else []
        # The model counts what this rank receives: the padded shard elements.
        REC.issue("reduce_scatter", _group_of(params), output.numel(), DTYPES.get(output.dtype, str(output.dtype)),
                  _parts(params))
        return REC.run_issued(lambda: orig_rs(output, input, *a, **k))

    def broadcast(tensor, *a, **k):
        # fsdp2_load_full_state_dict broadcasts the entries of this rank's own state dict in order
        keys = REC.broadcast_keys or []
        key = keys[REC.broadcast_index] if REC.broadcast_index < len(keys) else "?"
        REC.broadcast_index += 1
        REC.issue("broadcast", key, tensor.numel(), DTYPES.get(tensor.dtype, str(tensor.dtype)),
                  {key: int(tensor.numel())})
        return REC.run_issued(lambda: orig_bc(tensor, *a, **k))

    _fsdp_param_group.foreach_all_gather = foreach_all_gather
    _fsdp_param_group.foreach_reduce = foreach_reduce
    dist.all_gather_single = all_gather_single
    dist.reduce_scatter_single = reduce_scatter_single
    dist.broadcast = broadcast


class FuncolRecorder:
    """A dispatch mode that lets DTensor desugar its math into functional
    collectives and records those (the all-gathers a merge or unmerge on the
    shards issues, torch/distributed/tensor/_redistribute.py), checked against
    the peers like any other. `names` maps a local shard's data_ptr to its
    parameter (group, name)."""

    def __new__(cls, names):
        from torch.utils._python_dispatch import TorchDispatchMode

        funcol = torch.ops._c10d_functional
        kinds = {funcol.all_gather_into_tensor.default: "all_gather",
                 funcol.reduce_scatter_tensor.default: "reduce_scatter",
                 funcol.all_reduce.default: "all_reduce",
                 funcol.broadcast.default: "broadcast"}

        from torch.distributed.tensor import _api, _dispatch, _redistribute

        class Mode(TorchDispatchMode):
            # the parameters among the DTensor op's arguments: a collective it
            # desugars into gathers one of them (possibly a reshaped copy)
            operands = []
            recent = []  # the parameters the latest DTensor ops read, with their local shapes
            current = None  # the parameter whose local tensor is being redistributed now
            saved = {}
            casts = []  # the cast copies `names` maps, kept alive while the op runs
            # id(cast copy) -> its parameter: an empty copy (a rank holding only padding) has
            # no address of its own, but DTensor wraps and redistributes that very object
            # (torch/distributed/tensor/_dispatch.py::OpDispatcher.wrap, redistribute_local_args)
            cast_ids = {}

            @staticmethod
            def origin(t):
                return Mode.cast_ids.get(id(t)) or names.get(t.untyped_storage().data_ptr())

            def __enter__(self):
                # DTensor redistributes one operand at a time (torch/distributed/tensor/
                # _dispatch.py::OpDispatcher.redistribute_local_args -> _redistribute.py::
                # redistribute_local_tensor): its local tensor names the collectives it issues.
                # DTensor.full_tensor goes through _redistribute.py::Redistribute.forward.
                for mod in (_api, _dispatch, _redistribute):
                    orig = mod.redistribute_local_tensor
                    Mode.saved[mod] = orig

                    def wrapped(local_tensor, *a, _orig=orig, **k):
                        # only a parameter's own shard, or a cast copy of one (peft's
                        # get_delta_weight runs bf16 A and B as .float()), names it; a derived
                        # tensor (a delta) is left to the operand heuristics below. No guess
                        # from shapes here: a rank holding only padding has empty A and B
                        # copies of one shape, and what this sets counts as exact.
                        known = Mode.origin(local_tensor)
                        before, Mode.current = Mode.current, known
                        try:
                            return _orig(local_tensor, *a, **k)
                        finally:
                            Mode.current = before
                    mod.redistribute_local_tensor = wrapped
                return super().__enter__()

            def __exit__(self, *exc):
                for mod, orig in Mode.saved.items():
                    mod.redistribute_local_tensor = orig
                Mode.saved = {}
                return super().__exit__(*exc)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if any(t is DTensor or issubclass(t, DTensor) for t in types):
                    dts = [a for a in args if isinstance(a, DTensor)]
                    ops = [names[a._local_tensor.untyped_storage().data_ptr()] for a in dts
                           if a._local_tensor.untyped_storage().data_ptr() in names]
                    if ops:  # the latest DTensor op on parameters (ops on derived tensors keep it)
                        Mode.operands = ops
                        Mode.recent = ([(tuple(a._local_tensor.shape), a._local_tensor.dtype, o) for a, o in zip(dts, ops)]
                                       + Mode.recent)[:8]
                    elif dts:
                        # derived copies (peft's get_delta_weight casts bf16 A and B with .float() on
                        # CPU): matched to the parameters just read by local shape
                        got = [Mode.cast_ids.get(id(a._local_tensor)) or next(
                            (o for shp, _, o in Mode.recent if shp == tuple(a._local_tensor.shape)), None)
                            for a in dts]
                        if all(got):
                            Mode.operands = got
                    if func is torch.ops.aten.mm.default and len(Mode.operands) == 2:
                        # Shard(0) @ Shard(0) keeps the lhs rows and gathers the rhs
                        # (torch/distributed/tensor/_ops/_matrix_ops.py::mm_single_dim_strategy)
                        Mode.operands = [Mode.operands[1], Mode.operands[0]]
                    return NotImplemented
                kind = kinds.get(func)
                if kind is not None:
                    t = args[0]
                    known = names.get(t.untyped_storage().data_ptr()) or Mode.current
                    exact = known is not None  # a parameter's own shard, not a guess from sizes
                    if known is None:  # a reshaped or padded copy: the operand of that size
                        same = [v for v in Mode.operands if v[2] == t.numel()]
                        known = same[0] if same else (Mode.operands[0] if len(Mode.operands) == 1 else None)
                    if known is None:  # else the one parameter whose local shard has this size
                        same = [v for v in names.values() if v[2] == t.numel()]
                        known = same[0] if len(same) == 1 else None
                    if known is None and Mode.operands:  # a padded copy (uneven shards): the op's layer
                        known = Mode.operands[0]
                    known = known[:2] if known else None
                    group, name = known or ("?", "?")
                    REC.issue(kind, group, t.numel(), DTYPES.get(t.dtype, str(t.dtype)), {name: int(t.numel())},
                              dtensor="exact" if exact else "guess")
                    out = REC.run_issued(lambda: func(*args, **(kwargs or {})),
                                         t if kind == "all_gather" else None)
                else:
                    out = func(*args, **(kwargs or {}))
                if (func is torch.ops.aten._to_copy.default and isinstance(out, torch.Tensor) and args
                        and isinstance(args[0], torch.Tensor)):
                    # a cast copy of a parameter's shard (peft's get_delta_weight runs bf16 A and B
                    # as .float() on CPU) names that parameter exactly: shapes alone cannot tell a
                    # square A from its B
                    src = Mode.origin(args[0])
                    if src is not None:
                        Mode.cast_ids[id(out)] = src
                        Mode.casts.append(out)  # held to the op's end: its id and address name only it
                        # an empty copy's address is shared by every empty tensor
                        if out.numel() > 0:
                            names[out.untyped_storage().data_ptr()] = src
                return out

        return Mode()
