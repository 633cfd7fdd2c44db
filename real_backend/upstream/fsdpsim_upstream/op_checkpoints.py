"""The op table's checkpoint rows (op_table.py): load_adapter, save_adapters / load_adapters
and the optimizer's DCP state dict, each as the executor runs it on a session (`run_*(s, op,
calls)`) and as the exported script writes it (`write_*(w, op, ind, calls)`). The executor
keeps what it saved or loaded for the observations (observe.py); the script keeps the calls.
torch, PEFT and the session are imported where a run needs them: the export imports this
module without them."""
import contextlib
import os
import sys

from .candidate_fixes import add_adapter_rollback
from .op_calls import OMIT, Call, Value, config, perform_all, print_all, refusal


# -- load_adapter -----------------------------------------------------------------------------
def source_dir(s, name):
    return os.path.join(s.tmpdir, f"src-{s.rank}-{name}")


def load_adapter_calls(scen, op):
    """PeftModel.load_adapter(path, name, is_trainable) from that adapter's own save_pretrained
    directory (a subfolder named after it unless it is `default`)."""
    a = scen.adapter(op.names[0])
    sub = "" if a.name == "default" else "/" + a.name
    path = Value(lambda s: source_dir(s, a.name) if not sub else os.path.join(source_dir(s, a.name), a.name),
                 lambda w: f"tmp.name + {sub!r}")
    dtype = Value(lambda s: s.scen.autocast(a), lambda w: OMIT if w.scen.dtype == "fp32" else str(w.scen.autocast(a)))
    return [Call("model", "load_adapter", path, adapter_name=a.name, is_trainable=op.trainable,
                 autocast_adapter_dtype=dtype)]


def run_load_adapter(s, op, calls):
    """The checkpoint holds the adapter's seeded initial values, written once per rank before, by
    PEFT on a base of the scenario's own architecture: the Linear stack, or on a `model` file the
    transformers model of its `model` line (whose dotted module paths a Linear stack cannot hold)."""
    from peft import get_peft_model
    from . import model_scenario
    from .session import Net, lora_config, seed_cpu
    name = op.names[0]
    a = s.scen.adapter(name)
    path = source_dir(s, name)
    if not os.path.exists(path):
        seed_cpu(s.scen.seed + 7 + s.scen.adapters.index(a))
        base = model_scenario.build_base(s.scen, s.scen.seed + 7) if s.scen.model else Net(s.scen.layers)
        src = get_peft_model(base, lora_config(a, layers=s.scen.layers), adapter_name=name)
        src.save_pretrained(path, selected_adapters=[name])
    with add_adapter_rollback(s, name):  # load_adapter adds it through PeftModel.add_adapter
        perform_all(s, calls)
    s.move_per_adapter(name)
    if s.scen.model:  # the targets PEFT matched for it (observe.owners reads them)
        model_scenario.resolve_targets(s)


def write_load_adapter(w, op, ind, calls):
    a = w.scen.adapter(op.names[0])
    w.emit(f"{ind}get_peft_model(base(), {config(a).text(w)}, adapter_name={a.name!r}).save_pretrained(tmp.name)")
    print_all(w, calls, ind)


# -- the optimizer's state dict (DCP) ---------------------------------------------------------
def run_save_optimizer(s, op, calls):
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    if s.sw["optimizer_ckpt_reshard"] == "on":
        s.reshard_all()
    # no optimizer was built (nothing trainable at prepare): nothing to save, as the model has it
    s.opt_ckpt = get_optimizer_state_dict(s.pm, s.opt) if s.opt is not None else {}


def run_load_optimizer(s, op, calls):
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict
    if s.opt_ckpt is None:
        raise refusal("no optimizer checkpoint to load (save_optimizer first)")
    if s.sw["optimizer_ckpt_reshard"] == "on":
        s.reshard_all()
    if s.opt is not None:
        set_optimizer_state_dict(s.pm, s.opt, s.opt_ckpt)


def write_optimizer_checkpoint(w, op, ind, calls):
    if w.sw["optimizer_ckpt_reshard"] == "on":
        w.fix(ind, "reshard every FSDP module before the optimizer checkpoint", "optimizer_ckpt_reshard")
        w.reshard_all(ind)
    w.emit(f"{ind}ckpt = get_optimizer_state_dict(model, opt)" if op.kind == "save_optimizer"
           else f"{ind}set_optimizer_state_dict(model, opt, ckpt)")


# -- save_adapters / load_adapters ------------------------------------------------------------
@contextlib.contextmanager
def save_key_prefixes(sw):
    """save_key_prefixes=wrappers_stripped, docs/findings/save-skips-checkpointed-layers.patch: the
    module-name prefixes PEFT 0.21 matches state-dict keys against (tuners_utils.py::
    _get_tuner_state_dict_key_prefixes) drop the wrapper segments that the wrappers' state-dict hooks
    strip from the keys. Applied around the real call: the prefixes it returns, stripped."""
    if sw.get("save_key_prefixes", "module_names") != "wrappers_stripped":
        yield
        return
    from peft.tuners import tuners_utils
    real = tuners_utils._get_tuner_state_dict_key_prefixes
    wrappers = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module")

    def stripped(model, adapter_name=None):
        return {".".join(p for p in k.split(".") if p not in wrappers) for k in real(model, adapter_name)}
    tuners_utils._get_tuner_state_dict_key_prefixes = stripped
    try:
        yield
    finally:
        tuners_utils._get_tuner_state_dict_key_prefixes = real

def run_save_adapters(s, op, calls):
    """PeftModel.save_pretrained's selection (all adapters unless named;
    adapter_save_selection=active keeps only the active one), each
    adapter's state dict through get_peft_model_state_dict (whose
    model.state_dict() runs FSDP's pre-hook, which reshards); rank 0
    writes. adapter_save_gather=on makes every managed tensor full first
    (DTensor.full_tensor, DCP's full state dict)."""
    import torch
    from peft.utils import get_peft_model_state_dict
    from torch.distributed.tensor import DTensor
    from . import observe
    from .session import saved_name
    if op.names:
        names = list(op.names)
    elif s.sw["adapter_save_selection"] == "active":
        names = list(s.pm.base_model.active_adapters)
    else:
        names = list(s.pm.peft_config)
    missing = [n for n in names if n not in s.pm.peft_config]
    if missing:
        raise refusal("selected adapters are not in the model: {" + ",".join(missing) + "}")
    sd = s.pm.state_dict()
    if s.sw["adapter_save_gather"] == "on":
        sd = {k: (v.full_tensor() if isinstance(v, DTensor) and (".lora_" in k or ".modules_to_save." in k) and
                  any(f".{n}." in k for n in names) else v) for k, v in sd.items()}
    s.saved = {}
    s.saved_obs = []
    for a in names:
        with save_key_prefixes(s.sw):
            asd = get_peft_model_state_dict(s.pm, state_dict=sd, adapter_name=a)
        local = {k: (v.to_local() if isinstance(v, DTensor) else v).detach().clone() for k, v in asd.items()}
        s.saved[a] = local
        for k, v in asd.items():
            t = v.to_local() if isinstance(v, DTensor) else v
            name = saved_name(k, a, s.scen)
            s.saved_obs.append({"name": name, "rows": int(t.shape[0]), "full_rows": int(v.shape[0]),
                                "dtype": observe.DTYPES.get(t.dtype, str(t.dtype))})
    s.saved_obs.sort(key=lambda x: observe.param_sort_key(s)(x["name"]))
    s.saved_view = list(s.saved_obs)  # kept for the reload (saved_obs goes to the observation)
    # what this rank held at save time: a reload must restore exactly that
    chosen = {x["name"] for x in s.saved_obs}
    s.saved_own = {n: observe.local_of(t).detach().clone() for n, t in observe.shard_objects(s) if n in chosen}
    # and how many AdamW steps each had taken: a step since that leaves the values as they were
    # (bf16 rounding an lr-sized update away) is one the reload's values cannot show
    s.saved_steps = {n: observe.adam_steps(s, t) for n, t in observe.shard_objects(s) if n in chosen}
    # each save has its own file: a rank 0 already at its next save never changes what a
    # peer still loads (the C++ backend's Comm::write_rank0_file numbers them the same way)
    s.saves = getattr(s, "saves", 0) + 1
    if s.rank == 0:
        torch.save(s.saved, os.path.join(s.tmpdir, f"adapters-{s.saves}.pt"))
        open(os.path.join(s.tmpdir, f"adapters-{s.saves}.done"), "w").close()


def write_save_adapters(w, op, ind, calls):
    """What save_pretrained writes: each selected adapter's get_peft_model_state_dict."""
    if op.names:
        names = repr(list(op.names))
    elif w.sw["adapter_save_selection"] == "active":
        w.emit(f"{ind}# not PEFT's default: only the active adapter, as accelerate's non-FSDP2 adapter_only path "
               f"selects")
        names = "model.base_model.active_adapters"
    else:
        names = "model.peft_config"
    # save_pretrained writes the tensors to a file: a copy. get_peft_model_state_dict's tensors share
    # the parameters' storage (nn.Module.state_dict detaches), so a later optimizer step would move them too.
    w.emit(f"{ind}saved = {{a: {{k: v.clone() for k, v in get_peft_model_state_dict(model, adapter_name=a).items()}} "
           f"for a in {names}}}")
    if w.sw["adapter_save_gather"] == "on" and w.fsdp:
        w.fix(ind, "gather every DTensor of the adapters' state dict before it is written", "adapter_save_gather")
        w.emit(f"{ind}saved = {{a: {{k: full(v) for k, v in sd.items()}} for a, sd in saved.items()}}")
    w.last_save = 1


def run_load_adapters(s, op, calls):
    """Every rank loads the file rank 0 wrote (set_peft_model_state_dict ->
    load_state_dict, whose FSDP pre-hook reshards), then compares what it
    holds with what was saved."""
    import torch
    from peft.utils import set_peft_model_state_dict
    from . import observe
    from .session import saved_name
    from .collectives import REC
    n = max(getattr(s, "saves", 0), 1)  # a peer that never saved reads rank 0's first
    # Whether rank 0 wrote (or will write) the file is decided by where rank 0 is, never by a clock:
    # a peer asks the coordinator, which sees every rank (pool.py::answer_files); rank 0's own file
    # (or a single rank's) is written by now or never.
    ready = REC.file_ready(n) if REC.file_ready is not None else \
        os.path.exists(os.path.join(s.tmpdir, f"adapters-{n}.done"))
    if not ready:
        raise refusal("no adapters were saved (save_adapters first)")
    saved = torch.load(os.path.join(s.tmpdir, f"adapters-{n}.pt"))
    s.reload_expect = getattr(s, "saved_own", None) or {}
    # rank 0's local rows, of the shape this rank holds: they land on this rank's rows
    full = {x["name"]: x["full_rows"] for x in getattr(s, "saved_view", [])}
    s.reload_foreign = set()
    for a, asd in saved.items():
        for k, v in asd.items():
            name = saved_name(k, a, s.scen)
            mine = s.reload_expect.get(name)
            if (s.rank > 0 and mine is not None and mine.shape[0] > 0 and name in full and
                    v.shape[0] == mine.shape[0] != full[name]):
                s.reload_foreign.add(name)
            # an unmanaged replica (added after prepare) takes rank 0's whole copy
            elif s.rank > 0 and mine is not None and observe.managed(s, name) is None:
                s.reload_foreign.add(name)
    for a, asd in saved.items():
        with save_key_prefixes(s.sw):  # the patched prefixes map a checkpointed layer's keys on load too
            res = set_peft_model_state_dict(s.pm, asd, adapter_name=a)
        if os.environ.get("FSDPSIM_UPSTREAM_DEBUG"):
            print("load", a, {k: tuple(v.shape) for k, v in asd.items()}, res, file=sys.stderr)


def write_load_adapters(w, op, ind, calls):
    if not w.last_save:
        raise ValueError("load_adapters without a save_adapters before it")
    w.emit(f"{ind}for a, sd in saved.items():")
    w.emit(f"{ind}    set_peft_model_state_dict(model, sd, adapter_name=a)")


# -- the whole model's state dict (DCP) -------------------------------------------------------
def run_save_model(s, op, calls):
    """get_model_state_dict, full (each DTensor gathered into a plain tensor on every rank) or
    sharded (the DTensors); each rank keeps a copy, as a script writing it to a file does."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    sd = get_model_state_dict(s.pm, options=StateDictOptions(full_state_dict=op.names[0] == "full"))
    s.model_sd = getattr(s, "model_sd", {})
    s.model_sd[op.names[0]] = {k: v.detach().clone() for k, v in sd.items()}


def run_load_model(s, op, calls):
    """The last save of its form, read afresh (set_model_state_dict rewrites the dict it is
    given: torch distributed/checkpoint/state_dict.py::_load_model_state_dict puts the
    distributed values into it). `plain` is nn.Module.load_state_dict of the full tensors."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    form = "sharded" if op.names[0] == "sharded" else "full"
    saved = getattr(s, "model_sd", {}).get(form)
    if saved is None:
        raise refusal(f"no {form} model state dict was saved (save_model {form} first)")
    sd = {k: v.clone() for k, v in saved.items()}
    if op.names[0] == "plain":
        s.pm.load_state_dict(sd)
    else:
        set_model_state_dict(s.pm, sd, options=StateDictOptions(full_state_dict=form == "full"))


def write_save_model(w, op, ind, calls):
    full = op.names[0] == "full"
    w.emit(f"{ind}model_sd_{op.names[0]} = {{k: v.clone() for k, v in get_model_state_dict("
           f"model, options=StateDictOptions(full_state_dict={full})).items()}}")


def write_load_model(w, op, ind, calls):
    form = "sharded" if op.names[0] == "sharded" else "full"
    sd = f"{{k: v.clone() for k, v in model_sd_{form}.items()}}"
    if op.names[0] == "plain":
        w.emit(f"{ind}model.load_state_dict({sd})")
    else:
        w.emit(f"{ind}set_model_state_dict(model, {sd}, options=StateDictOptions(full_state_dict={form == 'full'}))")
