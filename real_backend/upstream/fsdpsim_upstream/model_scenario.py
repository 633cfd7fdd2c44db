"""A `model` scenario on the real libraries (docs/guide/seq-format.md, "Real models"): the
transformers model built from the scenario's config (model_config.py), its modules that own
parameters taken as the scenario's layers (the names the model backend lowers them to,
model/vocab/model_lowering.cpp), PEFT's own target matching read back off the injected model,
token-id batches and the causal LM loss, and `fully_shard_plan transformer_layers` sharded by
accelerate's own Accelerator.prepare with its transformer-class auto-wrap (prepare.py's
accelerator()), or, where that cannot run, by the fully_shard calls it makes."""
import torch

from . import model_config
from .seqfile import Layer, Shard


def build_base(scen, seed, meta=False):
    """The base model from its config, drawn from `seed` (no download); on meta for a ram-efficient
    rank > 0, as transformers loads it under accelerate's fsdp_cpu_ram_efficient_loading."""
    if not meta:
        return model_config.build(scen.model, seed)
    with torch.device("meta"):
        return model_config.build(scen.model, seed)


def layers_of(model):
    """Every module that owns a parameter (recurse=False), in named_modules() order, as a Layer:
    fan_in / fan_out as the LoRA layer PEFT puts on it sees them (a Linear's weight (out, in), a
    transformers Conv1D's (in, out), an Embedding's (num, dim), a norm's (dim,) with one input).
    A tied parameter counts once, where named_parameters() lists it (torch's remove_duplicate):
    a tied output head owns none of its own."""
    from transformers.pytorch_utils import Conv1D
    seen, out = set(), []
    for name, m in model.named_modules():
        own = [p for p in m.parameters(recurse=False)]
        if not name or not own or any(id(p) in seen for p in own):
            continue
        seen.update(id(p) for p in own)
        w = m.weight
        conv = isinstance(m, Conv1D)
        fan_in, fan_out = (1, w.shape[0]) if w.dim() == 1 else (w.shape[0], w.shape[1]) if conv else (w.shape[1], w.shape[0])
        out.append(Layer(name, int(fan_in), int(fan_out), shape=list(w.shape), transposed=conv))
    return out


def resolve_targets(sess):
    """Each adapter's targets as PEFT matched them (target_modules suffixes, all-linear): the
    layers whose LoRA layer holds that adapter (peft tuners_utils.py::BaseTuner.inject_adapter).
    An adapter not injected yet (deferred, or loaded later) keeps its written targets until it is."""
    changed = False
    for a in sess.scen.adapters:
        if getattr(a, "resolved", False):
            continue
        hit = [l.name for l in sess.scen.layers if a.name in getattr(sess.layer(l.name), "lora_A", {})]
        if hit:
            a.targets, a.resolved, changed = hit, True, True
    if changed:
        sess._param_owners = None  # observe.owners reads the targets


def batch(scen, rank):
    """Token ids (4, seq_len) in [0, vocab): the same batch on every rank, or with `data per_rank`
    each rank its own, as a DistributedSampler hands out."""
    shift = rank * 1000003 if scen.data == "per_rank" else 0
    g = torch.Generator().manual_seed(scen.seed + 1 + shift)
    return torch.randint(0, scen.model["vocab"], (4, scen.model["seq_len"]), generator=g)


def loss(pm, x):
    """The causal LM loss transformers computes from labels = input_ids (shifted inside:
    loss/loss_utils.py::ForCausalLMLoss)."""
    return pm(input_ids=x, labels=x).loss.float()


def generate(pm, x, steps):
    """generate N on a `model` file: the call an RL rollout makes, PeftModel.generate with greedy
    decoding of exactly N new tokens (transformers generation/utils.py::GenerationMixin.generate:
    the prefill, then one forward of the inner causal LM per token against the KV cache). PEFT
    reaches it through the base model (peft_model.py::PeftModelForCausalLM.generate), so the root
    unit's FSDP hooks, on the PeftModel's forward, do not run. Returns the tokens' sum as the
    pending loss (no grad: a backward of it raises, as after eval)."""
    with torch.no_grad():
        out = pm.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=steps, min_new_tokens=steps,
                          do_sample=False, pad_token_id=0)
    return out.float().sum()


def decoder_class(model):
    """The decoder layer class a user names to accelerate's transformer_based_wrap
    (fsdp_transformer_layer_cls_to_wrap): the model's _no_split_modules, which accelerate also
    falls back on (fsdp_utils.py::fsdp2_prepare_auto_wrap_policy)."""
    return list(model._no_split_modules)


def plan_shards(scen, pm):
    """The fully_shard calls accelerate 1.15's fsdp2_prepare_model makes on the PeftModel `pm` with
    transformer_based_wrap (utils/fsdp_utils.py), as Shard lines named as the model backend names
    their groups: each decoder layer (the auto-wrap, bottom-up), the input embedding's own unit where
    it is not tied, the tail fully_shard([final norm, tied input embedding, output embedding],
    reshard_after_forward=False), then the root. The final norm is accelerate's own _find_final_norm
    on the PeftModel (its base_model_prefix attribute resolves through PEFT to gpt2's `transformer`,
    but to llama's whole LlamaForCausalLM, whose children hold no norm)."""
    from accelerate.utils.fsdp_utils import _find_final_norm
    base = pm.base_model.model
    name = {id(m): n for n, m in base.named_modules()}
    classes = set(decoder_class(base))
    out = [Shard([n], "none") for n, m in base.named_modules() if type(m).__name__ in classes]
    emb, head = base.get_input_embeddings(), base.get_output_embeddings()
    tied = emb.weight is head.weight
    if not tied:
        out.append(Shard([name[id(emb)]], "none"))
    tail = [m for m in (_find_final_norm(pm), emb if tied else None, head) if m is not None]
    out.append(Shard([name[id(m)] for m in tail], "false"))
    return out + [Shard(["root"], "none")]


def group_order(scen, shards):
    """{group: position}: the model backend's order, the root first, then each call at the first
    layer it holds in the model (model/machine/topology.cpp)."""
    index = {l.name: i for i, l in enumerate(scen.layers)}

    def first(d):
        under = [i for n, i in index.items() for p in d.modules if n == p or n.startswith(p + ".")]
        return min(under) if under else len(index)

    return {("root" if d.is_root else d.modules[0]): (-1 if d.is_root else first(d)) for d in shards}


def through_accelerate(sess, prepare):
    """Accelerator.prepare(model, AdamW over the adapter parameters) with the plugin's
    transformer_based_wrap naming the decoder layer class: accelerate's own fsdp2_prepare_model
    shards the decoder layers, the embedding, the tail and the root (plan_shards names them)."""
    from .collectives import REC
    from .observe import model_name
    held = prepare.optimizer_params(sess)
    ram = sess.scen.loading == "ram_efficient"
    if ram:  # fsdp2_prepare_model broadcasts every state-dict entry (fsdp2_load_full_state_dict)
        REC.broadcast_keys = [model_name(k) for k in sess.pm.state_dict()]
        REC.broadcast_index = 0
    try:
        acc = prepare.accelerator(decoder_class(sess.pm.base_model.model), True, ram, sess.scen.mp)
        model, opt = acc.prepare(sess.pm, prepare.adamw(held))
    finally:
        REC.broadcast_keys = None
    sess.pm, sess.opt, sess.opt_names = model, opt, prepare.held_names(model, opt, held)


LAYERS = {}  # the model line's layers (one meta build per config, whatever the rank or the reuse)


def layers_for(scen):
    key = tuple(sorted(scen.model.items()))
    if key not in LAYERS:
        LAYERS[key] = layers_of(build_base(scen, 0, meta=True))
    return [Layer(l.name, l.fan_in, l.fan_out, shape=l.shape, transposed=l.transposed) for l in LAYERS[key]]
