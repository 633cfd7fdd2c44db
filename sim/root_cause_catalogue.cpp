// The root-cause catalogue's data (root_cause_catalogue.hpp). Verdicts and
// citations were read from the upstream threads and from the pinned releases'
// installed source (torch 2.13.0, PEFT 0.21.2, accelerate 1.15.0,
// transformers 5.24.0); a verdict changes here, and the pages follow.
#include "sim/root_cause_catalogue.hpp"
#include "model/vocab/enum_names.hpp"

namespace fsdpsim {

const char* root_verdict_name(RootVerdict v) {
  return enum_names<RootVerdict>("bug, fixed in", "bug, fix proposed", "bug, reported", "bug, unreported", "documented behaviour",
                                 "misuse", "unreviewed")[v];
}

const char* root_verdict_word(RootVerdict v) {
  return enum_names<RootVerdict>("fixed", "fix-proposed", "reported", "unreported", "documented", "misuse", "unreviewed")[v];
}

namespace {

using V = RootVerdict;

// Shared text of the "written on the unsharded copy, dropped at reshard" family.
const char* const kCopyFlags =
    "Under FSDP2 a module's parameters are the sharded DTensors S except while its group is unsharded, when the "
    "all-gathered copies U are registered instead (torch _fsdp_param.py::FSDPParam.to_unsharded). PEFT flips "
    "`requires_grad` on whatever `named_parameters()` yields (peft utils/other.py::_set_layer_requires_grad), so a flip "
    "made while U is registered lands on U. The next reshard (FSDPParam.to_sharded) registers S again and writes nothing "
    "back: the flip is gone, S keeps the old flags, and the following steps train the wrong adapter or nothing "
    "(\"element 0 of tensors does not require grad\"). A group is left unsharded by an explicit `unshard()`, by a forward "
    "or eval whose group has `reshard_after_forward=False` (accelerate's root resolves `None` to that), or mid-step. ";

}  // namespace

const std::vector<RootCauseEntry>& root_cause_catalogue() {
  static const std::vector<RootCauseEntry> table = {
      {"flag-on-copy/set_adapter",
       "PeftModel.set_adapter flips requires_grad on the unsharded copy; the next reshard drops it",
       V::FixProposed, "huggingface/peft#3895 (open; not in PEFT 0.21.2)",
       {"huggingface/peft#3872: the report (seed 000), settled with a CPU repro on one and two ranks; maintainer approved "
        "the fix direction",
        "huggingface/peft#3895: unmerge, then reshard every FSDP module, then set_adapter"},
       std::string(kCopyFlags) + "`PeftModel.set_adapter` (peft peft_model.py) in 0.21.2 neither reshards nor unmerges first.",
       "Anyone switching adapters under FSDP2 between steps (multi-adapter training, RL policy/reference switches) after "
       "an eval or a merge.",
       "Call `unmerge_adapter()` and `reshard()` on every FSDP module before `set_adapter`.",
       "PeftModel.set_adapter: unmerge, reshard all FSDP2 modules, then flip the flags (peft#3895).",
       "set_adapter_reshard=unmerge_first"},
      {"flag-on-copy/disable_adapter-exit",
       "Leaving disable_adapter() re-enables adapters on the unsharded copy; the next reshard drops it",
       V::FixProposed, "huggingface/peft#3800 (named in peft#3872; not in PEFT 0.21.2)",
       {"huggingface/peft#3872: the exit path goes through the same module-level set_adapter and needs the same reshard",
        "huggingface/peft#3800: the proposed change at the disable_adapter exit"},
       std::string(kCopyFlags) + "The exit of `PeftModel.disable_adapter` calls `enable_adapter_layers`, whose "
                                 "`BaseTunerLayer.enable_adapters` sets the flags on U.",
       "Users of `with model.disable_adapter():` for reference passes (DPO/GRPO-style) under FSDP2.",
       "Reshard every FSDP module before leaving the block.",
       "PeftModel.disable_adapter: reshard FSDP2 modules in its exit before enable_adapter_layers (peft#3800).",
       "disable_exit_reshard=on"},
      {"flag-on-copy/disable_adapter-enter",
       "Entering disable_adapter() freezes adapters on the unsharded copy; the next reshard restores them",
       V::Unreported, "no upstream report (same family as huggingface/peft#3872)",
       {"huggingface/peft#3872: the mechanism, for set_adapter"},
       std::string(kCopyFlags) + "Entering `PeftModel.disable_adapter` runs `disable_adapter_layers`, which freezes every "
                                 "adapter through the registered objects; no proposed fix covers the entry.",
       "Reference passes under FSDP2 that enter disable_adapter() while a group is unsharded.",
       "Reshard every FSDP module before entering the block.",
       "Reshard inside BaseTuner.disable_adapter_layers (or BaseTunerLayer.enable_adapters), so every caller gets it.", ""},
      {"flag-on-copy/base_model.set_adapter",
       "BaseTuner.set_adapter (the list form) flips requires_grad on the unsharded copy; the next reshard drops it",
       V::Unreported, "no upstream report (same family as huggingface/peft#3872)",
       {"huggingface/peft#3872: the mechanism, for PeftModel.set_adapter; its fix does not cover BaseTuner.set_adapter"},
       std::string(kCopyFlags) + "`model.base_model.set_adapter([...])` (peft tuners_utils.py::BaseTuner.set_adapter) "
                                 "has no FSDP handling at all.",
       "Users activating several adapters at once under FSDP2.",
       "Reshard every FSDP module before base_model.set_adapter.",
       "Reshard in the module-level tuners_utils.set_adapter that both set_adapter paths call.", ""},
      {"flag-on-copy/delete_adapter-fallback",
       "delete_adapter's fallback makes the remaining adapter trainable on the unsharded copy; the next reshard drops it",
       V::Unreported, "no upstream report",
       {"huggingface/peft#3716 and #3743: maintainers want the fallback adapter trainable (a different gap)"},
       std::string(kCopyFlags) + "When the deleted adapter was active, `BaseTunerLayer.delete_adapter` makes a remaining "
                                 "adapter active and trainable through the registered objects.",
       "Users deleting the active adapter mid-training under FSDP2.",
       "Reshard every FSDP module before delete_adapter, or call set_adapter afterwards with every group sharded.",
       "Reshard FSDP2 modules in BaseTuner.delete_adapter before the layers' delete_adapter.", ""},
      {"weight-on-copy/merge-unmerge",
       "LoRA merge/unmerge edit the registered weight, which under FSDP2 may be the unsharded copy; the reshard drops "
       "the edit",
       V::Unreported, "no standalone report (the mechanism is acknowledged in huggingface/peft#3872)",
       {"huggingface/peft#3872: a reshard drops a merge made on the unsharded copy",
        "pytorch/pytorch#129229: FSDP2 never writes changes to the all-gathered parameters back to the shards"},
       "`Linear.merge` / `Linear.unmerge` (peft tuners/lora/layer.py) do `W.data += delta` (or `-=`) on the registered "
       "weight. While the group is unsharded that is the all-gathered copy U, and FSDPParam.to_sharded discards it: a "
       "merge is lost (the shard misses the delta while the layer lists it merged) or an unmerge is (the shard keeps the "
       "delta while nothing is listed). Every caller reaches it: merge_adapter, unmerge_adapter, set_adapter's own unmerge "
       "(also with the peft#3895 fix, which unmerges before it reshards), a load's inject_adapter, the patched "
       "disable_adapter exit.",
       "Anyone merging or unmerging under FSDP2 while a group is unsharded (after an eval with "
       "reshard_after_forward=False, an explicit unshard, or mid-step).",
       "Merge and unmerge only while every FSDP group is sharded (call reshard() on every FSDP module first).",
       "Reshard the owning FSDP module before the weight edit in BaseTuner.merge_adapter / unmerge_adapter (or refuse "
       "to edit an unsharded weight).",
       ""},
      {"weight-on-copy/disabled-forward",
       "A disabled LoRA layer's forward unmerges on the unsharded copy; the reshard keeps the delta in the shard",
       V::Unreported, "no upstream report",
       {"peft 0.21.2 tuners/lora/layer.py::Linear.forward: a disabled, merged layer unmerges first"},
       "With adapters disabled, `Linear.forward` unmerges a merged layer before computing the base output. Under FSDP2 "
       "the forward runs after the group's pre-forward all-gather, so the subtraction lands on U and the reshard drops "
       "it: the layer records nothing merged while its shard still holds W0 + delta, for good (extra_delta).",
       "Users who merge, then run a reference pass inside disable_adapter() under FSDP2.",
       "Call unmerge_adapter() with every group sharded before entering disable_adapter().",
       "Do not unmerge inside forward under FSDP2 (raise or warn), or unmerge with the groups resharded at "
       "disable_adapter entry.",
       ""},
      {"optimizer-checkpoint-while-unsharded",
       "DCP's optimizer state dict maps the optimizer's shards by identity; after a no_grad eval the module registers "
       "the unsharded copies: KeyError",
       V::Unreported, "no upstream issue in accelerate or torch; a downstream fix exists (seed 004)",
       {"pytorch/pytorch#131965: the root stays unsharded after forward by design",
        "pytorch/pytorch#155319: the root is kept unsharded when reshard_after_forward is unspecified"},
       "`get_optimizer_state_dict` / `set_optimizer_state_dict` (torch distributed/checkpoint/state_dict.py) map each "
       "optimizer parameter to a name by object identity over `named_parameters()`. After a forward whose group does "
       "not reshard (accelerate's root: reshard_after_forward None resolves to False), or an explicit unshard, the module "
       "registers U while the optimizer holds S: the lookup raises `KeyError: 0` (or a sharded parameter's name). "
       "accelerate's `save_fsdp_optimizer` calls it without resharding.",
       "Frameworks that save only the optimizer after an eval (Accelerator.save_state saves the model first and so "
       "reshards).",
       "Call reshard() on every FSDP module (or model.state_dict()) before saving or loading the optimizer.",
       "accelerate save_fsdp_optimizer / load_fsdp_optimizer: reshard first; or DCP: map through the sharded parameters.",
       "optimizer_ckpt_reshard=on"},
      {"optimizer-holds-deleted-adapter",
       "The optimizer still holds a deleted adapter's parameters; DCP's name lookup raises KeyError",
       V::Misuse, "the optimizer was not rebuilt after delete_adapter",
       {},
       "`delete_adapter` removes the adapter's modules, but the optimizer keeps their parameter objects; DCP's "
       "`get_optimizer_state_dict` maps parameters to names by identity and raises KeyError for those no longer in the "
       "module (a load of a checkpoint saved before the delete too).",
       "Users deleting adapters while training with an optimizer built before.",
       "Rebuild the optimizer after delete_adapter (or drop the adapter's parameters from its param_groups and state).",
       "None upstream; a PEFT warning when deleting parameters that require grad would help.", ""},
      {"save-keeps-local-shard",
       "get_peft_model_state_dict saves each rank's FSDP2 shard, not the full adapter tensors",
       V::FixedIn, "huggingface/accelerate#4206 (accelerate 1.15.0) for accelerate's save path",
       {"huggingface/accelerate#4206: FULL_STATE_DICT + adapter_only wrote rank 0's slice only; merged, in 1.15.0"},
       "PEFT's `get_peft_model_state_dict` (peft utils/save_and_load.py) gathers tensor-parallel DTensors but not FSDP2 "
       "ones, so each rank's state dict holds its local rows; rank 0 writes its slice and a reload restores (N-1)/N of "
       "each adapter to its init. accelerate's FULL_STATE_DICT path now gathers through DCP (accelerate#4206); calling "
       "PEFT's save directly on an FSDP2 model still saves the shard.",
       "Anyone saving adapters with save_pretrained / get_peft_model_state_dict on an FSDP2 model outside accelerate's "
       "gathered path.",
       "Use accelerate >= 1.15.0's save path, or DCP get_model_state_dict(full_state_dict=True) before saving.",
       "Gather FSDP2 DTensors in get_peft_model_state_dict (accelerate#4206 fixes accelerate's path).",
       "adapter_save_gather=on"},
      {"placement-differs-across-ranks",
       "With cpu_ram_efficient_loading a second adapter is left on CPU / another dtype on some ranks: prepare's "
       "broadcast hangs or mismatches",
       V::Reported, "huggingface/peft#2834 (closed without a fix; fix PR #2836 closed unmerged)",
       {"huggingface/peft#2834: the report (seed 001)", "huggingface/peft#2836: the closed fix (per-adapter check)"},
       "`BaseTunerLayer._move_adapter_to_device_of_base_layer` skips a whole lora_A/lora_B container when any adapter "
       "in it is on meta. On ranks > 0 under RAM-efficient loading the first adapter is on meta, so a later adapter "
       "stays on CPU in its load dtype there while rank 0 moves it; accelerate's `fsdp2_load_full_state_dict` "
       "broadcasts in each rank's own dtype and the ranks' collectives no longer match.",
       "accelerate users with fsdp_cpu_ram_efficient_loading and more than one adapter.",
       "Set fsdp_cpu_ram_efficient_loading: false, or load every adapter before prepare.",
       "Check only the new adapter's own parameters for meta in _move_adapter_to_device_of_base_layer.",
       "adapter_meta_check=per_adapter"},
      {"delta-weight-on-local-shard",
       "get_delta_weight computes on the local shard of a sharded LoRA parameter",
       V::Reported, "huggingface/peft#3080 (open; fix PR #3102 closed, FSDP1 only)",
       {"huggingface/peft#3080: the reshape error in ParamWrapper.get_delta_weight",
        "huggingface/peft#3102: the closed fix (seed 002)"},
       "`ParamWrapper.get_delta_weight` (peft tuners/lora/layer.py) reshapes `lora_A.weight` as registered; while the "
       "group is sharded that is the local rows only, so the reshape fails or the delta is not the layer's.",
       "Users of target_parameters (MoE experts) under FSDP2 who merge or read the delta outside a forward.",
       "Unshard the adapter's FSDP module (or run inside a forward) before get_delta_weight.",
       "Compute the delta from full tensors (DTensor.full_tensor()) in ParamWrapper.get_delta_weight.",
       "delta_weight_gather=on"},
      {"param-wrapper-single-expert",
       "A target_parameters layer with one expert takes Linear's delta path: an (out, in) delta for an (1, in, out) weight",
       V::Unreported, "no upstream report", {"peft 0.21.2 ParamWrapper.get_delta_weight: num_experts == 1 uses Linear.get_delta_weight"},
       "`ParamWrapper.get_delta_weight` returns Linear's `(out, in)` delta when E = 1, for a weight stored `(1, in, out)`: "
       "the forward raises torch's broadcasting error, delta_weight returns a delta that is not the layer's, and a merge "
       "of a square layer adds the transposed delta (rank 0's rows only at world 2).",
       "Users targeting a 3-D experts parameter with a single expert.",
       "Target the module instead, or squeeze the expert dimension.",
       "Reshape and transpose the E = 1 delta to the parameter's shape in ParamWrapper.get_delta_weight.", ""},
      {"enable-ignores-inference-mode",
       "enable_adapters makes an inference_mode (frozen) adapter trainable",
       V::Reported, "huggingface/peft#3447 (closed: known, deferred as backwards-incompatible; fix PR #3453 closed)",
       {"huggingface/peft#3447: leaving disable_adapter() turns frozen adapters trainable",
        "huggingface/peft#3453: the closed fix"},
       "`BaseTunerLayer.enable_adapters(True)` calls the layer's `set_adapter(active)` without the adapters' "
       "inference_mode, so a frozen adapter becomes trainable after `disable_adapter()` or `enable_adapter_layers()`.",
       "Users keeping a frozen reference adapter active beside a trained one.",
       "After the block, call set_requires_grad(frozen adapters, False).",
       "Pass each adapter's inference_mode in BaseTunerLayer.enable_adapters (planned for PEFT v1.0).",
       "enable_inference_mode=respect"},
      {"disable-exit-not-scoped",
       "disable_adapter()'s exit enables the adapters active at exit, not those active at entry",
       V::Unreported, "no upstream report (nesting was fixed apart: huggingface/peft#3565)",
       {"huggingface/peft#3565: the context manager made reentrant (snapshots the disabled flag, not the active set)"},
       "A `set_adapter`, `add_adapter` or `delete_adapter` inside `with model.disable_adapter():` outlives the block: "
       "the exit's `enable_adapter_layers` enables the layers' current active adapters, so the adapter active before "
       "the block does not train again (and a delete's fallback trains another). PEFT does this without FSDP too.",
       "Reference-pass code that switches adapters inside disable_adapter().",
       "Do not change adapters inside the block; call set_adapter again after it.",
       "Snapshot the active adapters (and their requires_grad) at entry and restore them at exit.", ""},
      {"delete-fallback-per-layer",
       "Deleting the active adapter: each layer falls back to its own first remaining adapter and makes it trainable",
       V::Unreported, "no upstream report (the MixedModel case was fixed: huggingface/peft#3515)",
       {"huggingface/peft#3515: the same cross-layer choice fixed for MixedModel.delete_adapter only"},
       "`BaseTunerLayer.delete_adapter` picks the first of the layer's own remaining adapters in sorted order and makes "
       "it trainable, so layers holding different adapters pick different ones, and an adapter loaded frozen "
       "(inference_mode) trains although nobody selected it.",
       "Users deleting the active adapter of a multi-adapter model.",
       "Call set_adapter on the adapter you want before deleting the active one.",
       "Choose the fallback once in BaseTuner.delete_adapter, honouring its inference_mode.", ""},
      {"raises-in/load_adapters",
       "set_peft_model_state_dict of a checkpoint holding an adapter deleted since raises KeyError midway",
       V::Documented, "peft utils/save_and_load.py::set_peft_model_state_dict docstring: the adapters must already be in place",
       {},
       "`set_peft_model_state_dict` reads `peft_config[adapter_name]` first, so loading a checkpoint that holds an "
       "adapter deleted since raises KeyError after the adapters before it were loaded.",
       "Code that reloads a multi-adapter checkpoint after deleting one of its adapters.",
       "add_adapter (or load_adapter) the name again before loading its weights.",
       "None needed; a clearer error before loading anything would help.", ""},
      {"training-a-merged-adapter",
       "Training an adapter whose delta is merged leaves the old delta in W; the unmerge subtracts the new one",
       V::Unreported, "no upstream report (PEFT does not warn)", {},
       "A merged adapter's A and B still require grad; an optimizer step moves them after their delta went into W, "
       "so W holds the old delta and `unmerge` subtracts the new one (corrupt). PEFT does this without FSDP too.",
       "Users who merge for a fast eval and keep training.",
       "Unmerge before any optimizer step.",
       "Freeze A and B while merged, or warn in merge when they require grad.", ""},
      {"backward-of-merged-forward",
       "A backward of a forward taken while merged has no LoRA path: no_grad_fn after the unmerge",
       V::Documented, "PEFT's merged forward skips the adapters (peft tuners/lora/layer.py::Linear.forward)", {},
       "A merged layer's forward returns the base output only, so its graph holds no adapter parameter; a backward of "
       "that output after `unmerge_adapter` raises autograd's \"element 0 of tensors does not require grad\".",
       "Users who merge for an eval and then backward the eval's output.",
       "Run the forward again after unmerge_adapter().",
       "None needed.", ""},
      {"delta-weight-from-stale-copy",
       "get_delta_weight reads the registered unsharded copy, one optimizer step behind the shards",
       V::Documented, "FSDP2 registers one copy at a time and never syncs them (pytorch/pytorch#144289, #129229)",
       {"pytorch/pytorch#144289: whichever copy is registered is what the module exposes",
        "pytorch/pytorch#137348: a pending unshard can miss the optimizer's update"},
       "After `unshard()` the module registers U; an optimizer step moves the shards only, so get_delta_weight reads "
       "U's older A and B.",
       "Users reading deltas between an explicit unshard and a reshard.",
       "reshard() after the optimizer step before reading the delta.",
       "None upstream.", ""},
      {"half-added-adapter",
       "A refused add_adapter / load_adapter leaves the adapter injected in earlier layers and the flags changed",
       V::Reported, "huggingface/peft#3707 (open)",
       {"huggingface/peft#3707: a failed injection leaves orphaned adapter layers"},
       "`BaseTuner.inject_adapter` injects target by target; when one is refused, the earlier layers keep the adapter, "
       "each layer's `update_layer` already ran its set_adapter with the new config's inference_mode (a frozen load "
       "freezes the active adapter), and the requires_grad restore at its end never runs. PeftModel drops only the config.",
       "Users loading adapters whose targets a sharded model refuses (checkpoint-wrapped or FSDP-wrapped experts).",
       "After a failed add, delete_adapter(name) and set_adapter again.",
       "Roll back the injected layers and the requires_grad snapshot in inject_adapter on failure.", ""},
      {"mixed-adapter-dtypes-in-one-group",
       "Two adapter dtypes trainable in one FSDP group: FSDP's lazy init raises the uniform-dtype AssertionError",
       V::Documented, "FSDP2 requires one original dtype among a group's trainable parameters (pytorch/pytorch#156784 asks to relax it)",
       {"pytorch/pytorch#156784: allow different dtypes for parameters with gradients (open)",
        "modelscope/twinkle#182: the same AssertionError from mixed LoRA dtypes"},
       "`FSDPParamGroup._init_mp_dtypes` (torch _fsdp_param_group.py) checks at lazy init that the group's trainable "
       "parameters share one dtype; a bf16 base with one adapter autocast to fp32 and another not makes two.",
       "Users mixing autocast_adapter_dtype settings across adapters on a bf16 base.",
       "Use one autocast_adapter_dtype for every adapter, or shard the adapters in their own group.",
       "None in torch (feature request pytorch#156784).", ""},
      {"unsynced-grads-reach-next-adapter",
       "A gradient kept on the unsharded copy by an unsynced micro-batch is reduced into the next adapter's step",
       V::Documented, "FSDP2's no-sync accumulation (pytorch/pytorch#118298, #126166)",
       {"pytorch/pytorch#126166: set_requires_gradient_sync keeps unsharded gradients until a synced backward"},
       "With `set_requires_gradient_sync(False)`, `FSDPParamGroup.post_backward` reshards without reducing and leaves "
       "each gradient on U; the next synced post_backward reduces every U that holds one, so an adapter trained in an "
       "earlier micro-batch gets a gradient (and an update) at a step meant for another.",
       "Gradient-accumulation loops that switch adapters between micro-batches.",
       "Do not switch adapters inside an accumulation window.",
       "None upstream.", ""},
      {"checkpoint-error-wedges-fsdp",
       "A raise mid-backward (a CheckpointError, a gradient dtype FSDP's reduce refuses) leaves FSDP in PRE_BACKWARD: no later backward reduces anything",
       V::Documented, "torch 2.13 FSDPModule.reset_iter_state docstring (the recovery is the caller's)",
       {"pytorch/pytorch#123857: the PRE_BACKWARD early return in FSDPState._pre_forward"},
       "An activation-checkpoint recompute that raises (a flag, merge or r changed between forward and backward) stops "
       "the backward before the root's final callback; `foreach_reduce` raising inside that callback (adapters of two "
       "dtypes trained in one group, or of the other dtype than at the lazy init's `_orig_dtype`) stops it part way. "
       "Either way FSDP states stay in PRE_BACKWARD and the callback stays marked queued, every later forward takes "
       "`FSDPState._pre_forward`'s early branch, and no later train step reduces a gradient (silently).",
       "Users of activation checkpointing who change adapters between forward and backward; users who switch to an "
       "adapter of another dtype (PEFT's autocast_adapter_dtype=False) after the first step.",
       "Catch the error and call reset_iter_state() on the root module.",
       "accelerate / Trainer could call reset_iter_state() when a step raises.", ""},
      {"late-adapter-not-managed-by-fsdp",
       "Adapters added after fully_shard are plain tensors no FSDP group reduces: each rank trains its own copy",
       V::Reported, "huggingface/transformers#48873 (open; fixed for the Trainer path in transformers 5.24.0)",
       {"huggingface/transformers#48792: N ranks train N different adapters, rank 0's is saved",
        "huggingface/transformers#48873: broadcast and average the unmanaged trainable parameters"},
       "`LoraLayer.update_layer` creates new modules after `fully_shard` ran; no group manages them, so nothing "
       "broadcasts their init or reduces their gradients, and with per-rank data the ranks' copies part at the first step.",
       "Loops outside transformers' Trainer that add adapters after sharding.",
       "Add every adapter before fully_shard, or broadcast and all-reduce the new parameters yourself.",
       "transformers Trainer does it (5.24.0); accelerate or PEFT would need the same.", ""},
      {"save-selects-active-only",
       "The adapter save writes only the active adapter, not every selected one",
       V::Unreported, "no upstream report (accelerate's non-FSDP2 adapter_only path)",
       {},
       "accelerate's non-FSDP2 `adapter_only` save (utils/fsdp_utils.py::_get_model_state_dict) writes "
       "`model.active_adapter` only, where PeftModel.save_pretrained saves every adapter by default.",
       "Multi-adapter users saving through that path.",
       "Save with PeftModel.save_pretrained(selected_adapters=None).",
       "Save every adapter in the adapter_only path.", "adapter_save_selection=all"},
      {"save-skips-checkpointed-layers",
       "Adapters of checkpoint-wrapped layers are missing from the saved adapter state dict",
       V::Unreported, "no upstream report", {},
       "A layer wrapped in checkpoint_wrapper names its tensors with the wrapper's prefix, which the adapter state "
       "dict's filtering does not expect, so the save silently leaves those layers' adapters out.",
       "Users combining activation checkpointing with adapter saves.",
       "Save from the unwrapped module, or check the saved keys.",
       "Strip the wrapper prefix when collecting the adapter state dict.", ""},
      {"rank-divergent-op",
       "An adapter op run on some ranks only: the ranks' collectives or adapter state diverge",
       V::Misuse, "every rank must run the same adapter ops in the same order",
       {},
       "An op run on one rank (`@R`) leaves the ranks with different adapters, merges or flags; the next collective "
       "hangs, or pairs with a peer's of another size (gloo aborts a rank), or, of the same size and dtype, pairs "
       "with another group or other parameters: gloo completes it cross-paired and each rank goes on with its peers' "
       "bytes of another tensor (silent corruption). No library fix applies: fsdpsim names the op that made the "
       "ranks diverge.",
       "Distributed code that switches adapters under a rank condition.",
       "Run adapter ops on every rank.", "None.", ""},
  };
  return table;
}

std::string finding_stem(const std::string& id) {
  std::string s = id;
  for (char& c : s)
    if (c == '/') c = '.';
  return s;
}

RootCauseEntry root_cause_entry(const std::string& id) {
  for (const auto& e : root_cause_catalogue())
    if (e.id == id) return e;
  RootCauseEntry e;
  e.id = id;
  e.title = "no catalogue entry: " + id;
  e.verdict = RootVerdict::Unreviewed;
  e.verdict_detail = "not yet read against upstream";
  return e;
}

std::string verdict_text(const RootCauseEntry& e) {
  std::string v = root_verdict_name(e.verdict);
  if (e.verdict == RootVerdict::Unreviewed || e.verdict_detail.empty()) return v;
  return v + (e.verdict == RootVerdict::Documented || e.verdict == RootVerdict::Misuse || e.verdict == RootVerdict::Unreported ? ": " : " ") +
         e.verdict_detail;
}

}  // namespace fsdpsim
