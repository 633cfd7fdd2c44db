"""The `model` scenario line as a transformers config (docs/guide/seq-format.md, "Real models"):
the family's model_type and the config keyword arguments its sizes become, so that
`AutoModelForCausalLM.from_config` builds the tree fsdpsim's model knows
(model/vocab/module_tree.cpp). Random init, no download."""


def parse_model_line(line):
    """`model FAMILY key=value ...` as printed by fsdpsim (every option spelled out) -> dict."""
    words = line.split()
    assert words[0] == "model", line
    out = {"family": words[1]}
    for w in words[2:]:
        k, v = w.split("=", 1)
        out[k] = v == "true" if k == "tie_embeddings" else int(v)
    return out


def config_kwargs(m):
    """(model_type, kwargs) for AutoConfig.for_model. qwen2_moe's `intermediate=` sizes the routed
    experts, the shared expert and the (unused at decoder_sparse_step=1) dense MLP alike."""
    fam = m["family"]
    if fam == "gpt2":
        # GPT2Config names: n_embd, n_inner, n_layer, n_head; it has no separate key/value heads
        kw = dict(n_embd=m["hidden"], n_inner=m["intermediate"], n_layer=m["layers"], n_head=m["heads"])
    else:
        kw = dict(hidden_size=m["hidden"], intermediate_size=m["intermediate"], num_hidden_layers=m["layers"],
                  num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"])
    kw.update(vocab_size=m["vocab"], tie_word_embeddings=m["tie_embeddings"])
    if fam == "qwen2_moe":
        kw.update(num_experts=m["experts"], num_experts_per_tok=m["top_k"], moe_intermediate_size=m["intermediate"],
                  shared_expert_intermediate_size=m["intermediate"])
    if fam != "gpt2":
        # token ids are in [0, vocab): the configs' default special ids would point past a tiny vocabulary
        kw.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    else:
        kw.update(bos_token_id=None, eos_token_id=None)
    return fam, kw


def build(m, seed):
    """The model from its config, initialised from `seed` (no download, no pretrained weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fam, kw = config_kwargs(m)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(fam, **kw))
