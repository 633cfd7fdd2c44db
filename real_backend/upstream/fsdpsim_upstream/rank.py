"""One persistent rank process: `dist.init_process_group("gloo")` and a CPU
device mesh once, then one sequence per request from the coordinator
(pool.py), over stdin/stdout JSON lines. Also what an exported torchrun script
runs (`standalone`)."""
import ctypes
import json
import os
import signal
import sys
import tempfile
import traceback
import warnings

from .timing import clock  # stdlib only (time, contextlib): safe before torch, and off post()'s path


def _die_with_parent():
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Channel:
    """The rank's line protocol with the coordinator; the original stdout is
    kept for it and sys.stdout goes to stderr so that no library print can
    corrupt the protocol."""

    # the longest a posted message waits for the next send (checked at each post)
    HOLD_S = 0.25

    def __init__(self):
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.inp = sys.stdin
        self.held, self.held_since = [], None

    def post(self, msg):
        """A message the coordinator reads only once the sequence has ended on every rank (the
        initial values, an op's observation): held and written with the rank's next message,
        which every wait for an answer starts with (a collective, an outcome, a file, the end).
        Each write wakes the coordinator, and on a loaded machine a woken process takes the
        core: one write per exchange instead of one per message."""
        self.held.append(json.dumps(msg, separators=(",", ":")) + "\n")
        if self.held_since is None:
            self.held_since = clock()
        elif clock() - self.held_since >= self.HOLD_S:
            self.send(None)

    def send(self, msg):
        """Writes the held messages, then `msg` (None: the held ones alone), in one write."""
        lines = self.held + ([json.dumps(msg, separators=(",", ":")) + "\n"] if msg is not None else [])
        self.held, self.held_since = [], None
        self.out.write("".join(lines))
        self.out.flush()

    def recv(self):
        line = self.inp.readline()
        if not line:
            os._exit(0)  # the coordinator is gone
        return json.loads(line)


def run_sequence(text, switches, rank, world, mesh, chan, tmpdir, reuse=False):
    from . import observe, profiles, seqfile
    from .collectives import REC, CollectiveAbort
    from .session import HarnessError, Session, classify_exception, harness_level

    from .timing import PHASES
    t_start = clock()
    PHASES.reset()
    scen, ops = seqfile.parse(text)
    sw = profiles.resolve(scen.profile, scen.sets, switches)
    REC.param_name.clear()
    REC.group_name.clear()

    def check(rec, step, dtensor=False, wire=None):
        with PHASES.timed("pairing"):  # the coordinator answers once every peer issued its n-th collective
            chan.send({"t": "coll", "step": step, "coll": rec, "dtensor": dtensor, "wire": wire})
            reply = chan.recv()
        if reply.get("t") != "go":
            raise CollectiveAbort(reply["status"], reply["message"])
        REC.probe = reply.get("probe")
        if dtensor and "group" in reply:  # the peers agree on one name for a DTensor collective
            rec["group"], rec["parts"] = reply["group"], {k: rec["count"] for k in reply["parts"]}

    def report(ident, outcome):
        # how a let-through collective ended here; the coordinator answers once every rank in it has
        with PHASES.timed("pairing"):
            chan.send(dict(outcome, t="out", id=ident))
            reply = chan.recv()
        if reply.get("t") != "go":
            raise CollectiveAbort(reply["status"], reply["message"])

    def file_ready(n):
        # rank 0's n-th adapter file: the coordinator answers once rank 0 wrote it or never will
        chan.send({"t": "file", "n": n})
        return bool(chan.recv().get("ready"))

    REC.check = check if world > 1 else None
    REC.file_ready = file_ready if world > 1 and rank > 0 else None
    REC.report = report if world > 1 else None
    REC.world = world
    REC.wire_dtypes = bool(scen.mp) or any(d.mp for d in scen.shards)
    sess = Session(scen, ops, rank, world, mesh, sw, tmpdir)
    if reuse:
        from . import reuse as kept
        sess.reuse_key = kept.key_of(text, sw)
    REC.log = []
    sess.build()
    with PHASES.timed("observe"):
        init = {"s": {}}
        for name, fp in sess.fsdp_param.items():
            if not name.endswith(".bias"):
                init["s"][name] = observe.flat(fp.sharded_param)
        w0 = {l: observe.flat(t) for l, t in sess.w0.items()}
        chan.post({"t": "init", "values": init, "w0": w0, "dtype": scen.dtype, "scaling": {
            a.name: a.alpha / a.r for a in scen.adapters}, "shapes": shapes_of(scen),
            "quant": [l.name for l in scen.layers if l.quant], "transposed": [l.name for l in scen.layers if l.transposed]})
    posted_shapes = shapes_of(scen)
    for i, op in enumerate(ops):
        if not op.runs_on(rank):
            continue
        step = i + 1
        inject_fault(rank, step)
        REC.log = []
        REC.step = step
        if op.is_training:  # only a training op's observation reads which shards received a gradient
            with PHASES.timed("observe"):
                observe.grad_marks(sess)
        status, message, index = "ok", "", None
        try:
            with observe.funcol_mode(sess, op), PHASES.op(op.kind):
                sess.run_op(op)
        except CollectiveAbort as e:
            # a rank stuck in a collective: only the collectives up to that one are known
            chan.post({"t": "obs", "obs": {"step": step, "rank": rank, "op": op.text(), "status": e.status,
                                           "message": e.message, "active": [], "disabled": False,
                                           "optimizer": {"missing": 0, "total": 0, "unregistered": []},
                                           "groups": [], "params": [], "layers": [], "collectives": REC.log,
                                           "sharded_bytes": {}, "peak_unsharded_bytes": {}}, "values": None})
            break
        except Exception as e:  # every other exception is that op's status
            if harness_level(e):  # an API this release lacks: the sequence cannot run here
                traceback.print_exc(file=sys.stderr)
                chan.send({"t": "fail", "message": f"cannot run: step {step} {op.text()}: {one_line(e)}"})
                return
            status, message = classify_exception(e)
            if isinstance(e, HarnessError):
                status, message = "value_error", str(e)
            if status == "key_error":
                index = key_error_index(sess, e)
                if index is not None and not isinstance(e.args[0], int):
                    message = f"KeyError: <sharded parameter {sess.opt_names[index]}>"
            if status == "exception":
                traceback.print_exc(file=sys.stderr)
        t_obs = clock()
        with observe.reading(sess):
            grads = observe.grads_received(sess) if op.is_training else None
            obs, values = observe.local(sess, op, step, grads)
        obs["status"] = status
        if message:
            obs["message"] = message
        if index is not None:
            obs["index"] = index
        obs["collectives"] = REC.log
        # an adapter added or loaded since (model_scenario.resolve_targets) has the targets PEFT
        # matched only now: the judge reads its factors' shapes from here on
        shapes = shapes_of(scen)
        if shapes != posted_shapes:
            chan.post({"t": "shapes", "shapes": shapes})
            posted_shapes = shapes
        chan.post({"t": "obs", "obs": obs, "values": values})
        PHASES.add("observe", clock() - t_obs)
    # which path prepared the model (prepare.py::run): "accelerate", a fallback's reason key, or none
    # yet; where the sequence's time went here (timing.py, bench.py's breakdown)
    PHASES.add("rank_total", clock() - t_start)
    chan.send({"t": "end", "prepared_by": sess.prepared_by, "timing": PHASES.report()})


def one_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def inject_fault(rank, step):
    """Test hooks for the harness itself: FSDPSIM_UPSTREAM_CRASH=R:S makes
    rank R exit at step S, FSDPSIM_UPSTREAM_STALL=R:S makes it block there
    (as a rank stuck where no pairing check runs would)."""
    for var, act in (("FSDPSIM_UPSTREAM_CRASH", "crash"), ("FSDPSIM_UPSTREAM_STALL", "stall")):
        spec = os.environ.get(var, "")
        if spec and spec == f"{rank}:{step}":
            if act == "crash":
                os._exit(17)
            import time
            while True:
                time.sleep(1)


def key_error_index(sess, e):
    """The optimizer position a KeyError names: DCP raises `KeyError: <pid>`
    on save and `KeyError: <tensor>` on load."""
    key = e.args[0] if e.args else None
    if isinstance(key, int):
        return key
    if sess.opt is not None:
        for i, p in enumerate(sess.opt.param_groups[0]["params"]):
            if p is key:
                return i
    return None


def shapes_of(scen):
    out = {}
    for l in scen.layers:
        e = max(l.experts, 1)
        out[scen.base_name(l.name)] = ([l.experts, l.fan_in, l.fan_out] if l.experts
                                       # a Params4bit holds two 4-bit codes a byte, as one column
                                       # (bitsandbytes/functional.py::quantize_4bit)
                                       else [(l.fan_out * l.fan_in + 1) // 2, 1] if l.quant
                                       else list(l.shape) if l.shape else [l.fan_out, l.fan_in])
        for a in scen.adapters:
            if l.name in a.targets:
                out[f"{l.name}.lora_A.{a.name}"] = [a.r * e, l.fan_in]
                out[f"{l.name}.lora_B.{a.name}"] = [l.fan_out, a.r * e]
                if a.use_dora:  # peft/tuners/lora/dora.py::DoraLinearLayer.update_layer: one norm per output row
                    out[f"{l.name}.lora_magnitude_vector.{a.name}"] = [l.fan_out]
            if l.name in a.modules_to_save:  # a deep copy of the Linear (other.py::ModulesToSaveWrapper.update)
                out[f"{l.name}.modules_to_save.{a.name}.weight"] = [l.fan_out, l.fan_in]
    return out


def main():
    _die_with_parent()
    chan = Channel()
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from .collectives import install

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    install()
    tmpdir = tempfile.mkdtemp(prefix=f"rank{rank}-", dir=os.environ.get("FSDPSIM_UPSTREAM_DIR"))
    import peft, accelerate, transformers, platform
    chan.send({"t": "ready", "rank": rank, "versions": {
        "torch": torch.__version__, "peft": peft.__version__, "accelerate": accelerate.__version__,
        "transformers": transformers.__version__, "python": platform.python_version()}})
    try:
        while True:
            req = chan.recv()
            if req.get("cmd") == "quit":
                break
            try:
                if os.environ.get("FSDPSIM_UPSTREAM_PROFILE") and rank == 0:
                    import cProfile
                    prof = globals().setdefault("_prof", cProfile.Profile())
                    prof.enable()
                    try:
                        run_sequence(req["seq"], req.get("switches"), rank, world, mesh, chan, req.get("dir") or tmpdir,
                             bool(req.get("reuse")))
                    finally:
                        prof.disable()
                        prof.dump_stats(os.environ["FSDPSIM_UPSTREAM_PROFILE"])
                    continue
                run_sequence(req["seq"], req.get("switches"), rank, world, mesh, chan, req.get("dir") or tmpdir,
                             bool(req.get("reuse")))
            except Exception as e:  # a failure outside any op: the sequence cannot run here
                traceback.print_exc(file=sys.stderr)
                from .session import harness_level
                chan.send({"t": "fail", "message": ("cannot run: " if harness_level(e) else "") + one_line(e)})
    finally:
        import shutil
        shutil.rmtree(tmpdir, ignore_errors=True)
        try:
            dist.destroy_process_group()
        except Exception:
            pass


if __name__ == "__main__":
    main()
