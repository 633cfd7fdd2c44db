// The root-cause catalogue's data (root_cause_catalogue.hpp). Each verdict names
// the source lines it rests on in the pinned releases (torch 2.13.0, PEFT 0.21.2,
// accelerate 1.15.0, transformers 5.24.0, read in the installed .venv) and each
// citation how it was checked: looked up in the tracker (its state there), or
// known only from a reporter's thread. A verdict changes here; the pages follow.
#include "sim/findings/root_cause_catalogue.hpp"

namespace fsdpsim {
namespace {

using V = RootVerdict;
using L = UpstreamLibrary;

Citation tracker(const char* ref, const char* state, const char* says) { return {ref, CitationCheck::Tracker, state, says}; }
Citation from_thread(const char* ref, const char* says) { return {ref, CitationCheck::ReporterThread, "", says}; }

// The source lines most entries share.
const SourceEvidence kToSharded = {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param.py", "FSDPParam.to_sharded",
                                   "registers the sharded parameter again and copies nothing back from the unsharded one"};
const SourceEvidence kToUnsharded = {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param.py", "FSDPParam.to_unsharded",
                                     "registers the all-gathered parameter on the module while the group is unsharded"};
const SourceEvidence kSetLayerFlags = {L::Peft, "peft/utils/other.py", "_set_layer_requires_grad",
                                       "sets requires_grad on whatever parameters the layer has registered"};
const SourceEvidence kSetAdapterHelper = {L::Peft, "peft/tuners/tuners_utils.py", "set_adapter",
                                          "the module-level helper both set_adapter paths end in: unmerges, then sets the flags"};
const SourceEvidence kOptimStateDict = {L::Torch, "torch/distributed/checkpoint/state_dict.py", "_get_optim_state_dict",
                                        "maps each optimizer parameter to a name by object identity over named_parameters()"};

// The FSDP1 twin, fixed in torch: the citations every flag-on-copy entry carries.
const Citation kFsdp1Twin = tracker("pytorch/pytorch#105371", "closed",
                                    "FSDP1's twin: a requires_grad change after a no_grad step was lost on the flat parameter");
const Citation kFsdp1Fix = tracker("pytorch/pytorch#104186", "closed",
                                   "FSDP1's fix: propagate the original parameters' requires_grad to the flat parameter");
const Citation kSeed000 = from_thread("huggingface/peft#3872",
                                      "the set_adapter case, settled with a CPU repro on one and two ranks; the maintainer approved "
                                      "the fix direction");

// Shared text of the "written on the unsharded copy, dropped at reshard" family.
const char* const kCopyFlags =
    "Under FSDP2 a module's parameters are the sharded DTensors S except while its group is unsharded, when the "
    "all-gathered copies U are registered instead (torch _fsdp_param.py::FSDPParam.to_unsharded). PEFT flips "
    "`requires_grad` on whatever `named_parameters()` yields (peft utils/other.py::_set_layer_requires_grad), so a flip "
    "made while U is registered lands on U. The next reshard (FSDPParam.to_sharded) registers S again and writes nothing "
    "back: the flip is gone, S keeps the old flags, and the following steps train the wrong adapter or nothing "
    "(\"element 0 of tensors does not require grad\"). A group is left unsharded by a no_grad eval whose group has "
    "`reshard_after_forward=False` (accelerate's root leaves it `None`, which resolves to that), by a forward, or by an "
    "explicit `unshard()`. ";

}  // namespace

const std::vector<RootCauseEntry>& root_cause_catalogue() {
  static const std::vector<RootCauseEntry> table = {
      {"flag-on-copy/set_adapter",
       "PeftModel.set_adapter flips requires_grad on the unsharded copy; the next reshard drops it",
       V::FixProposed, "huggingface/peft#3895 (from the reporter's thread; not independently verified; not in PEFT 0.21.2)",
       {kSetAdapterHelper, kSetLayerFlags,
        {L::Peft, "peft/peft_model.py", "PeftModel.set_adapter", "calls base_model.set_adapter with no FSDP handling in 0.21.2"},
        kToUnsharded, kToSharded},
       {kSeed000, from_thread("huggingface/peft#3895", "unmerge, then reshard every FSDP module, then set_adapter"), kFsdp1Twin,
        kFsdp1Fix},
       std::string(kCopyFlags) + "`PeftModel.set_adapter` (peft peft_model.py) in 0.21.2 neither reshards nor unmerges first.",
       "Anyone switching adapters under FSDP2 between steps (multi-adapter training, RL policy/reference switches) after "
       "an eval or a merge.",
       "Call `unmerge_adapter()` and `reshard()` on every FSDP module before `set_adapter`.",
       "PeftModel.set_adapter: unmerge, reshard all FSDP2 modules, then flip the flags (peft#3895).",
       "set_adapter_reshard=unmerge_first"},
      {"flag-on-copy/disable_adapter-exit",
       "Leaving disable_adapter() re-enables adapters on the unsharded copy; the next reshard drops it",
       V::Unreported, "no report of its own; the peft#3872 thread mentions a proposed change at the exit (peft#3800), known from that aside only",
       {{L::Peft, "peft/peft_model.py", "PeftModel.disable_adapter", "its exit calls enable_adapter_layers with no FSDP handling"},
        {L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer.enable_adapters", "re-enables through set_adapter on the registered parameters"},
        kSetLayerFlags, kToSharded},
       {kSeed000, from_thread("huggingface/peft#3800", "a proposed change at the disable_adapter exit, named in one aside of the peft#3872 thread"),
        kFsdp1Twin, kFsdp1Fix},
       std::string(kCopyFlags) + "The exit of `PeftModel.disable_adapter` calls `enable_adapter_layers`, whose "
                                 "`BaseTunerLayer.enable_adapters` sets the flags on U.",
       "Users of `with model.disable_adapter():` for reference passes (DPO/GRPO-style) under FSDP2.",
       "Reshard every FSDP module before leaving the block.",
       "PeftModel.disable_adapter: reshard FSDP2 modules in its exit before enable_adapter_layers.",
       "disable_exit_reshard=on"},
      {"flag-on-copy/disable_adapter-enter",
       "Entering disable_adapter() freezes adapters on the unsharded copy; the next reshard restores them",
       V::Unreported, "no upstream report (the same mechanism as peft#3872)",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer.enable_adapters", "disabling freezes the registered parameters"},
        kSetLayerFlags, kToSharded},
       {kSeed000, kFsdp1Twin, kFsdp1Fix},
       std::string(kCopyFlags) + "Entering `PeftModel.disable_adapter` runs `disable_adapter_layers`, which freezes every "
                                 "adapter through the registered objects.",
       "Reference passes under FSDP2 that enter disable_adapter() while a group is unsharded.",
       "Reshard every FSDP module before entering the block.",
       "Reshard inside BaseTuner.disable_adapter_layers (or BaseTunerLayer.enable_adapters), so every caller gets it.", "tuner_flags_reshard=on"},
      {"flag-on-copy/base_model.set_adapter",
       "BaseTuner.set_adapter (the list form) flips requires_grad on the unsharded copy; the next reshard drops it",
       V::Unreported, "no upstream report (the same mechanism as peft#3872; a fix in PeftModel.set_adapter alone misses this path)",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTuner.set_adapter", "calls the module-level set_adapter helper directly"},
        kSetAdapterHelper, kSetLayerFlags, kToSharded},
       {kSeed000, kFsdp1Twin, kFsdp1Fix},
       std::string(kCopyFlags) + "`model.base_model.set_adapter([...])` (peft tuners_utils.py::BaseTuner.set_adapter) "
                                 "ends in the same module-level helper as PeftModel.set_adapter.",
       "Users activating several adapters at once under FSDP2.",
       "Reshard every FSDP module before base_model.set_adapter.",
       "Reshard in the module-level tuners_utils.set_adapter that both set_adapter paths call.", "tuner_flags_reshard=on"},
      {"flag-on-copy/delete_adapter-fallback",
       "delete_adapter's fallback makes the remaining adapter trainable on the unsharded copy; the next reshard drops it",
       V::Unreported, "no upstream report",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer.delete_adapter", "makes the fallback adapter active through set_adapter"},
        kSetLayerFlags, kToSharded},
       {tracker("huggingface/peft#3716", "closed", "the fallback's modules_to_save copy stayed frozen (a different gap, no FSDP)"),
        tracker("huggingface/peft#3743", "merged", "the fix for peft#3716: the fallback adapter is made trainable"), kFsdp1Twin},
       std::string(kCopyFlags) + "When the deleted adapter was active, `BaseTunerLayer.delete_adapter` makes a remaining "
                                 "adapter active and trainable through the registered objects.",
       "Users deleting the active adapter mid-training under FSDP2.",
       "Reshard every FSDP module before delete_adapter, or call set_adapter afterwards with every group sharded.",
       "Reshard FSDP2 modules in BaseTuner.delete_adapter before the layers' delete_adapter.", "tuner_flags_reshard=on"},
      {"weight-on-copy/merge-unmerge",
       "LoRA merge/unmerge edit the registered weight, which under FSDP2 may be the unsharded copy; the reshard drops "
       "the edit",
       V::Unreported, "no standalone report (the reporter's thread of peft#3872 acknowledges the mechanism)",
       {{L::Peft, "peft/tuners/lora/layer.py", "Linear.merge", "adds the delta to the registered base weight in place"},
        {L::Peft, "peft/tuners/lora/layer.py", "Linear.unmerge", "subtracts it from the registered base weight in place"},
        kToSharded},
       {from_thread("huggingface/peft#3872", "a reshard would drop a merge made on the unsharded copies"),
        tracker("pytorch/pytorch#129229", "closed", "a maintainer: FSDP2 does not write changes to the all-gathered parameters back to the shards")},
       "`Linear.merge` / `Linear.unmerge` (peft tuners/lora/layer.py) do `W.data += delta` (or `-=`) on the registered "
       "weight. While the group is unsharded that is the all-gathered copy U, and FSDPParam.to_sharded discards it: a "
       "merge is lost (the shard misses the delta while the layer lists it merged) or an unmerge is (the shard keeps the "
       "delta while nothing is listed). Every caller reaches it: merge_adapter, unmerge_adapter, set_adapter's own unmerge, "
       "a load's inject_adapter, the disable_adapter exit.",
       "Anyone merging or unmerging under FSDP2 while a group is unsharded (after a no_grad eval with "
       "reshard_after_forward=False, or mid-step).",
       "Merge and unmerge only while every FSDP group is sharded (call reshard() on every FSDP module first).",
       "Reshard the owning FSDP module before the weight edit in BaseTuner.merge_adapter / unmerge_adapter (or refuse "
       "to edit an unsharded weight).",
       ""},
      {"dora-data-assign-on-shard",
       "DoRA's merge and unmerge assign `weight.data = new_weight`; on an FSDP2 sharded (DTensor) weight that assignment "
       "leaves the local shard as it was: the merge is lost while merged_adapters lists the adapter",
       V::Unreported,
       "no PEFT report of it found; torch's maintainers acknowledge that a `.data` assignment does not work on FSDP2's "
       "DTensor parameters and mean to document it (pytorch/pytorch#157391, open)",
       {{L::Peft, "peft/tuners/lora/variants.py", "DoraLinearVariant.merge_unsafe",
         "ends with `orig_weight.data = new_weight`: a new tensor assigned to the parameter, nothing written into it"},
        {L::Peft, "peft/tuners/lora/layer.py", "Linear.unmerge",
         "assigns the DoRA variant's unmerged weight with `weight.data = unmerged` (the safe_merge path of Linear.merge "
         "assigns `base_layer.weight.data = orig_weight` the same way)"},
        {L::Torch, "torch/distributed/tensor/_api.py", "DTensor.__new__",
         "keeps the shard in `_local_tensor`, which every DTensor op and FSDP2's all-gather read; the `.data` setter "
         "swaps the wrapper's own (storage-less) tensor and leaves it as it was (measured on torch 2.13, no FSDP needed)"}},
       {tracker("pytorch/pytorch#157391", "open",
                "FSDP2 maintainers: changing `.data` does not work for the DTensor model.parameters(); the contract is to be "
                "documented (from a report in pytorch#157209)"),
        tracker("pytorch/pytorch#89845", "closed", "DTensor does not support the `param.data = view` idiom (FSDP1 worked around it)"),
        tracker("huggingface/peft#1806", "merged", "made DoRA train under FSDP; its merge paths kept the `.data` assignment")},
       "Under FSDP2 a resharded layer's base weight is a DTensor parameter whose shard lives in its `_local_tensor`. "
       "`DoraLinearVariant.merge_unsafe` (peft tuners/lora/variants.py) computes the merged weight and assigns it with "
       "`orig_weight.data = new_weight`; on a DTensor that setter changes the wrapper's own tensor only, so the local "
       "shard, which the next all-gather reads, keeps W0. The layer appends the adapter to merged_adapters anyway, so the "
       "forward skips the DoRA path and runs the base weight alone: outputs lose the adapter, silently. The unmerge "
       "(`weight.data = unmerged` in lora/layer.py::Linear.unmerge) is lost the same way. LoRA's default merge writes in "
       "place (`weight.data += delta`) and lands; its `safe_merge=True` path assigns `.data` and is lost too "
       "(measured at world 2; not modelled).",
       "Users who merge DoRA adapters on an FSDP2 model for generation or evaluation (merge_adapter, RL rollouts), and "
       "users of merge(safe_merge=True) on a sharded layer.",
       "Do not merge under FSDP2: DoRA's unmerged forward computes the same output; or merge on a full copy of the "
       "weights (get_model_state_dict(full_state_dict=True)).",
       "In PEFT: write the new weight in place (`with torch.no_grad(): orig_weight.copy_(new_weight)`) in "
       "DoraLinearVariant.merge_unsafe, Linear.unmerge's variant branch and the safe_merge assignment (measured: the "
       "merged forward then equals the unmerged one at world 2). In torch: make DTensor's `.data` setter raise, or document "
       "the contract (pytorch#157391).",
       ""},
      {"weight-on-copy/disabled-forward",
       "A disabled LoRA layer's forward unmerges on the unsharded copy; the reshard keeps the delta in the shard",
       V::Unreported, "no upstream report",
       {{L::Peft, "peft/tuners/lora/layer.py", "Linear.forward", "with adapters disabled, a merged layer unmerges before the base forward"},
        {L::Peft, "peft/tuners/lora/layer.py", "Linear.unmerge", "subtracts from the registered base weight in place"}, kToSharded},
       {tracker("pytorch/pytorch#129229", "closed", "a maintainer: FSDP2 does not write changes to the all-gathered parameters back to the shards")},
       "With adapters disabled, `Linear.forward` unmerges a merged layer before computing the base output. Under FSDP2 "
       "the forward runs after the group's pre-forward all-gather, so the subtraction lands on U and the reshard drops "
       "it: the layer records nothing merged while its shard still holds W0 + delta, for good.",
       "Users who merge, then run a reference pass inside disable_adapter() under FSDP2.",
       "Call unmerge_adapter() with every group sharded before entering disable_adapter().",
       "Do not unmerge inside forward under FSDP2 (raise or warn), or unmerge with the groups resharded at "
       "disable_adapter entry.",
       ""},
      {"optimizer-checkpoint-while-unsharded",
       "DCP's optimizer state dict maps the optimizer's shards by identity; after a no_grad eval the module registers "
       "the unsharded copies: KeyError",
       V::Unreported, "no upstream issue in accelerate or torch found",
       {kOptimStateDict,
        {L::Accelerate, "accelerate/utils/fsdp_utils.py", "save_fsdp_optimizer", "calls get_optimizer_state_dict without resharding first"},
        {L::Accelerate, "accelerate/utils/fsdp_utils.py", "fsdp2_prepare_model", "shards the root with reshard_after_forward left to torch's default"},
        {L::Torch, "torch/distributed/fsdp/_fully_shard/_fully_shard.py", "fully_shard",
         "an unspecified reshard_after_forward keeps the root unsharded after forward"},
        kToUnsharded},
       {tracker("pytorch/pytorch#155319", "closed", "keep the root unsharded when reshard_after_forward is not specified"),
        tracker("pytorch/pytorch#154704", "closed", "respect reshard_after_forward=True for the root (what pytorch#131965 had answered as by design)"),
        tracker("pytorch/pytorch#131965", "closed", "the root stays unsharded after forward; outdated by pytorch#154704")},
       "`get_optimizer_state_dict` / `set_optimizer_state_dict` (torch distributed/checkpoint/state_dict.py) map each "
       "optimizer parameter to a name by object identity over `named_parameters()`. After a forward whose group does "
       "not reshard (accelerate's root: reshard_after_forward unspecified keeps the root unsharded), the module registers "
       "U while the optimizer holds S: the lookup raises `KeyError: 0` (or a sharded parameter's name). accelerate's "
       "`save_fsdp_optimizer` calls it without resharding.",
       "Frameworks that save only the optimizer after an eval (Accelerator.save_state saves the model first and so "
       "reshards).",
       "Call reshard() on every FSDP module (or model.state_dict()) before saving or loading the optimizer.",
       "accelerate save_fsdp_optimizer / load_fsdp_optimizer: reshard first; or DCP: map through the sharded parameters.",
       "optimizer_ckpt_reshard=on"},
      {"optimizer-holds-deleted-adapter",
       "The optimizer still holds a deleted adapter's parameters; DCP's name lookup raises KeyError",
       V::Misuse, "the optimizer was not rebuilt after delete_adapter",
       {{L::Peft, "peft/peft_model.py", "PeftModel.delete_adapter", "removes the adapter's modules; the optimizer is the caller's"},
        kOptimStateDict},
       {},
       "`delete_adapter` removes the adapter's modules, but the optimizer keeps their parameter objects; DCP's "
       "`get_optimizer_state_dict` maps parameters to names by identity and raises KeyError for those no longer in the "
       "module (a load of a checkpoint saved before the delete too).",
       "Users deleting adapters while training with an optimizer built before.",
       "Rebuild the optimizer after delete_adapter (or drop the adapter's parameters from its param_groups and state).",
       "None upstream; a PEFT warning when deleting parameters that require grad would help.", ""},
      {"save-keeps-local-shard",
       "get_peft_model_state_dict saves each rank's FSDP2 shard, not the full adapter tensors",
       V::Unreported,
       "no upstream report for PEFT's get_peft_model_state_dict (unchanged through 0.21.2); accelerate's own FULL_STATE_DICT "
       "path was fixed apart (accelerate#4206, 1.15.0) and is not what the repro calls",
       {{L::Peft, "peft/utils/save_and_load.py", "get_peft_model_state_dict", "gathers tensor-parallel DTensors only, not FSDP2 shards"},
        {L::Accelerate, "accelerate/utils/fsdp_utils.py", "_get_model_state_dict",
         "the FULL_STATE_DICT adapter_only path goes through DCP get_model_state_dict (gathered)"}},
       {tracker("huggingface/accelerate#4206", "merged",
                "accelerate's FULL_STATE_DICT + adapter_only save wrote rank 0's slice only; fixed in accelerate's path")},
       "PEFT's `get_peft_model_state_dict` (peft utils/save_and_load.py) gathers tensor-parallel DTensors but not FSDP2 "
       "ones, so each rank's state dict holds its local rows; rank 0 writes its slice and a reload restores (N-1)/N of "
       "each adapter to its init. accelerate's FULL_STATE_DICT path gathers through DCP (accelerate#4206); calling "
       "PEFT's save directly on an FSDP2 model still saves the shard.",
       "Anyone saving adapters with save_pretrained / get_peft_model_state_dict on an FSDP2 model outside accelerate's "
       "gathered path.",
       "Use accelerate >= 1.15.0's save path, or DCP get_model_state_dict(full_state_dict=True) before saving.",
       "Gather FSDP2 DTensors in get_peft_model_state_dict, as it does for tensor parallelism.",
       "adapter_save_gather=on"},
      {"placement-differs-across-ranks",
       "With cpu_ram_efficient_loading a second adapter is left on CPU / another dtype on some ranks: prepare's "
       "broadcast hangs, mismatches or fills it part-way",
       V::Reported, "huggingface/peft#2834 (from the reporter's thread; not independently verified)",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer._move_adapter_to_device_of_base_layer",
         "skips the move when any parameter of the layer's adapter container (every adapter's, not only this one's) is on meta"}},
       {from_thread("huggingface/peft#2834", "FSDP QLoRA with multiple adapters hangs in prepare; fsdp_cpu_ram_efficient_loading: false avoids it"),
        tracker("huggingface/peft#2836", "closed", "proposed deleting the meta check rather than making it per adapter; not merged")},
       "`BaseTunerLayer._move_adapter_to_device_of_base_layer` skips moving an adapter when any parameter of the "
       "layer's adapter container is on the meta device, whichever adapter it belongs to. With accelerate's "
       "cpu_ram_efficient_loading the ranks other than 0 hold the first adapter on meta, so a second adapter is never "
       "moved or cast there: it keeps its own device and dtype while rank 0 casts it to the base layer's, and FSDP's "
       "init broadcast then hangs, or pairs buffers of other byte counts: a bf16 rank 0 sending into an fp32 copy "
       "fills its first half and leaves the rest as torch.empty left it (gloo completes both), an fp32 rank 0 "
       "sending into a bf16 copy aborts the receiver.",
       "Multi-adapter users of accelerate's cpu_ram_efficient_loading (QLoRA recipes).",
       "Set fsdp_cpu_ram_efficient_loading: false, or load every adapter before accelerate.prepare.",
       "Check only this adapter's parameters for the meta device in _move_adapter_to_device_of_base_layer.", ""},
      {"delta-weight-on-local-shard",
       "get_delta_weight computes on the local shard of a sharded LoRA parameter",
       V::Unreported, "related to huggingface/peft#3080 (FSDP1, inside forward); the FSDP2 variant is unreported",
       {{L::Peft, "peft/tuners/lora/layer.py", "ParamWrapper.get_delta_weight", "reshapes lora_A/lora_B as they are registered"}},
       {tracker("huggingface/peft#3080", "open", "the FSDP1 case: the reshape inside forward fails on sharded lora weights"),
        tracker("huggingface/peft#3102", "closed", "a proposed FSDP1 fix through summon_full_params; not merged")},
       "`ParamWrapper.get_delta_weight` (target_parameters, MoE experts) reshapes lora_A and lora_B as registered; while the "
       "group is sharded that is the local rows only, so the reshape fails or the delta is not the layer's.",
       "Users of target_parameters (MoE experts) under FSDP2 who merge or read the delta outside a forward.",
       "Unshard the adapter's FSDP module (or run inside a forward) before get_delta_weight.",
       "Compute the delta from full tensors (DTensor.full_tensor()) in ParamWrapper.get_delta_weight.",
       "delta_weight_gather=on"},
      {"param-wrapper-single-expert",
       "A target_parameters layer with one expert takes Linear's delta path: an (out, in) delta for an (1, in, out) weight",
       V::Unreported, "no upstream report",
       {{L::Peft, "peft/tuners/lora/layer.py", "ParamWrapper.get_delta_weight",
         "with num_experts == 1 returns Linear's (out, in) delta, meant for a 2-D parameter or block-diagonal experts"}},
       {tracker("huggingface/peft#2638", "merged", "introduced ParamWrapper (target_parameters); its E = 1 path then transposed Linear's delta")},
       "`ParamWrapper.get_delta_weight` returns Linear's `(out, in)` delta when E = 1, for a weight stored `(1, in, out)`: "
       "the forward raises torch's broadcasting error, delta_weight returns a delta that is not the layer's, and a merge "
       "of a square layer adds the transposed delta. It needs no FSDP.",
       "Users targeting a 3-D experts parameter with a single expert.",
       "Target the module instead, or squeeze the expert dimension.",
       "Reshape and transpose the E = 1 delta to the parameter's shape in ParamWrapper.get_delta_weight.",
       "single_expert_delta=param_layout"},
      {"enable-ignores-inference-mode",
       "enable_adapters makes an inference_mode (frozen) adapter trainable",
       V::Reported, "huggingface/peft#3447 (closed; its fix PR #3453 closed unmerged)",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer.enable_adapters", "calls set_adapter without the adapters' inference_mode"}},
       {tracker("huggingface/peft#3447", "closed", "leaving disable_adapter() turns adapters loaded with inference_mode=True trainable"),
        tracker("huggingface/peft#3453", "closed", "the proposed fix; not merged")},
       "`BaseTunerLayer.enable_adapters(True)` calls the layer's `set_adapter(active)` without the adapters' "
       "inference_mode, so a frozen adapter becomes trainable after `disable_adapter()` or `enable_adapter_layers()`. "
       "It needs no FSDP.",
       "Users keeping a frozen reference adapter active beside a trained one.",
       "After the block, call set_requires_grad(frozen adapters, False).",
       "Pass each adapter's inference_mode in BaseTunerLayer.enable_adapters.",
       "enable_inference_mode=respect"},
      {"disable-exit-not-scoped",
       "disable_adapter()'s exit enables the adapters active at exit, not those active at entry",
       V::ByDesign,
       "the block restores the enabled state only (huggingface/peft#3565); a set_adapter, add_adapter or delete_adapter "
       "inside it is the user's own state change",
       {{L::Peft, "peft/peft_model.py", "PeftModel.disable_adapter", "snapshots and restores the disabled state, not the active set"}},
       {tracker("huggingface/peft#3565", "merged", "made the context manager reentrant by snapshotting the disabled state at entry"),
        tracker("huggingface/peft#3555", "open", "the nesting report #3565 fixes")},
       "A `set_adapter`, `add_adapter` or `delete_adapter` inside `with model.disable_adapter():` outlives the block: "
       "the exit's `enable_adapter_layers` enables the layers' current active adapters. The block is defined to restore "
       "whether adapters are enabled, not which are active. PEFT does this without FSDP too.",
       "Reference-pass code that switches adapters inside disable_adapter().",
       "Do not change adapters inside the block; call set_adapter again after it.",
       "None needed; the docstring could say that adapter changes inside the block persist.", ""},
      {"delete-fallback-per-layer",
       "Deleting the active adapter: each layer falls back to its own first remaining adapter and makes it trainable",
       V::Unreported,
       "no upstream report; it breaks the contract of PEFT's own BaseTunerLayer.delete_adapter docstring (\"the new adapter is "
       "chosen in a deterministic way, so that the same adapter is chosen on all layers\")",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer.delete_adapter",
         "the docstring promises the same fallback on all layers; the body picks the first of the layer's own remaining adapters"},
        {L::Peft, "peft/tuners/tuners_utils.py", "delete_adapter", "the module-level helper takes the new active adapters from the first layer"}},
       {tracker("huggingface/peft#3515", "merged",
                "fixed the cross-layer choice for MixedModel only, reasoning that on BaseTuner every tuner layer hosts the same "
                "adapters; adapters with different target_modules break that premise")},
       "`BaseTunerLayer.delete_adapter` picks the first of the layer's own remaining adapters in sorted order and makes "
       "it trainable, so layers holding different adapters (adapters with different target_modules) pick different ones, "
       "and an adapter loaded frozen (inference_mode) trains although nobody selected it. It needs no FSDP.",
       "Users deleting the active adapter of a multi-adapter model whose adapters target different modules.",
       "Call set_adapter on the adapter you want before deleting the active one.",
       "Choose the fallback once in BaseTuner.delete_adapter, honouring its inference_mode.", "delete_fallback=shared"},
      {"raises-in/load_adapters",
       "set_peft_model_state_dict of a checkpoint holding an adapter deleted since raises KeyError midway",
       V::Documented, "set_peft_model_state_dict's docstring: the model needs the adapters already in place",
       {{L::Peft, "peft/utils/save_and_load.py", "set_peft_model_state_dict", "its docstring requires the PEFT adapters to be in place"}},
       {},
       "`set_peft_model_state_dict` reads `peft_config[adapter_name]` first, so loading a checkpoint that holds an "
       "adapter deleted since raises KeyError after the adapters before it were loaded.",
       "Code that reloads a multi-adapter checkpoint after deleting one of its adapters.",
       "add_adapter (or load_adapter) the name again before loading its weights.",
       "None needed; a clearer error before loading anything would help.", ""},
      {"training-a-merged-adapter",
       "Training an adapter whose delta is merged leaves the old delta in W; the unmerge subtracts the new one",
       V::Misuse, "an optimizer step on gradients taken before merge_adapter, applied while merged, is outside PEFT's contract",
       {{L::Peft, "peft/tuners/lora/layer.py", "Linear.merge", "adds the delta of A and B as they are at merge time"},
        {L::Peft, "peft/tuners/lora/layer.py", "Linear.unmerge", "subtracts the delta of A and B as they are at unmerge time"}},
       {},
       "A merged adapter's A and B still require grad; an optimizer step moves them after their delta went into W, "
       "so W holds the old delta and `unmerge` subtracts the new one. PEFT does this without FSDP too.",
       "Users who merge for a fast eval and step the optimizer before unmerging.",
       "Unmerge before any optimizer step.",
       "None needed; a warning in merge when A and B require grad would help.", ""},
      {"backward-of-merged-forward",
       "A backward of a forward taken while merged has no LoRA path: no_grad_fn after the unmerge",
       V::Misuse, "merging is for inference: a merged layer's forward runs the base layer only, so its output has no adapter path to train",
       {{L::Peft, "peft/tuners/lora/layer.py", "Linear.forward", "a merged layer returns the base layer's output"}},
       {},
       "A merged layer's forward returns the base output only, so its graph holds no adapter parameter; a backward of "
       "that output after `unmerge_adapter` raises autograd's \"element 0 of tensors does not require grad\".",
       "Users who merge for an eval and then backward the eval's output.",
       "Run the forward again after unmerge_adapter().",
       "None needed.", ""},
      {"delta-weight-from-stale-copy",
       "get_delta_weight reads the registered unsharded copy, one optimizer step behind the shards",
       V::ByDesign, "FSDP2 registers one copy at a time and never syncs them (pytorch/pytorch#144289, #129229)",
       {kToUnsharded, kToSharded},
       {tracker("pytorch/pytorch#144289", "closed", "a maintainer: whichever copy is registered is what the module exposes"),
        tracker("pytorch/pytorch#129229", "closed", "a maintainer: changes to the all-gathered parameters are not written back")},
       "After `unshard()` the module registers U; an optimizer step moves the shards only, so get_delta_weight reads "
       "U's older A and B.",
       "Users reading deltas between an explicit unshard and a reshard.",
       "reshard() after the optimizer step before reading the delta.",
       "None upstream.", ""},
      {"half-added-adapter",
       "A refused add_adapter / load_adapter leaves the adapter injected in earlier layers and the flags changed",
       V::Reported, "huggingface/peft#3707 (open)",
       {{L::Peft, "peft/tuners/tuners_utils.py", "BaseTuner.inject_adapter",
         "injects target by target and restores the requires_grad snapshot only at its end"},
        {L::Peft, "peft/peft_model.py", "PeftModel.add_adapter",
         "on an exception from the injection deletes only the peft_config entry, then re-raises"},
        {L::Peft, "peft/tuners/tuners_utils.py", "BaseTuner._inject_parameters",
         "refuses a target_parameters entry whose module is a tuner layer of another class than `ParamWrapper`, "
         "compared by `__class__.__name__`: fully_shard's `FSDPParamWrapper` fails it: a later adapter's target_parameters entry on a sharded experts layer is refused"}},
       {tracker("huggingface/peft#3707", "open", "a failed injection leaves orphaned adapter layers"),
        tracker("huggingface/peft#3487", "closed", "injection applied a new adapter's inference_mode to the active adapters"),
        tracker("huggingface/peft#3495", "merged", "snapshot requires_grad before injection and restore it after; a refused injection skips the restore")},
       "`BaseTuner.inject_adapter` injects target by target; when one is refused, the earlier layers keep the adapter, "
       "each layer's `update_layer` already ran its set_adapter with the new config's inference_mode (a frozen load "
       "freezes the active adapter), and the requires_grad restore at its end (peft#3495) never runs. PeftModel drops "
       "only the config. The release matrix shows it on PEFT 0.20.0 and later, not on 0.17.1-0.19.1.",
       "Users whose add_adapter / load_adapter PEFT refuses part-way: a target_parameters entry on a module another "
       "adapter targets with target_modules (plain PEFT, the script), a checkpoint-wrapped layer, or an experts "
       "parameter whose ParamWrapper fully_shard wrapped (its class renamed `FSDPParamWrapper`, which "
       "`_inject_parameters`' class-name check refuses; adding adapters after fully_shard is unsupported anyway, "
       "so that refusal is the trigger here, not a report of its own).",
       "After a failed add, delete_adapter(name) and set_adapter again.",
       "In PeftModel.add_adapter's rollback, also delete the adapter from every tuner layer holding it and restore the "
       "requires_grad flags taken before the injection.", "add_adapter_rollback=on"},
      {"mixed-adapter-dtypes-in-one-group",
       "Trainable parameters of two dtypes in one FSDP group (an fp32 LoRA adapter beside a bf16 modules_to_save copy): "
       "FSDP's lazy init raises the uniform-dtype AssertionError",
       V::Documented, "FSDP2 requires one original dtype among a group's trainable parameters (pytorch/pytorch#156784 asks to relax it)",
       {{L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup._init_mp_dtypes",
         "asserts one original dtype among the group's trainable parameters"}},
       {tracker("pytorch/pytorch#156784", "open", "allow different dtypes for parameters with gradients"),
        tracker("modelscope/twinkle#182", "closed", "the same AssertionError from LoRA parameters in fp32 on a bf16 model")},
       "`FSDPParamGroup._init_mp_dtypes` (torch _fsdp_param_group.py) checks at lazy init that the group's trainable "
       "parameters share one dtype. On a bf16 base, PEFT autocasts the LoRA adapter to fp32 by default while a "
       "`modules_to_save` copy keeps the base's bf16: one adapter and its trainable copy make two dtypes in the root group.",
       "Users of modules_to_save (or of adapters with different autocast_adapter_dtype) on a bf16 base under FSDP2.",
       "Pass autocast_adapter_dtype=False (or cast the adapters to the base dtype), or shard the copies in their own group.",
       "None in torch (feature request pytorch#156784).", ""},
      {"raises-in/post_backward",
       "Adapters of two dtypes made trainable after FSDP's lazy init: the backward's reduce-scatter raises the "
       "uniform-gradient-dtype AssertionError",
       V::Documented,
       "FSDP2 reduces one gradient dtype per group (torch _fsdp_collectives.py::foreach_reduce asserts it; "
       "pytorch/pytorch#156784 asks to relax it); lazy init checked only the adapters trainable then",
       {{L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "foreach_reduce",
         "asserts one dtype among the gradients it reduce-scatters"},
        {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup._init_mp_dtypes",
         "checks the trainable parameters' dtypes once, at lazy init"}},
       {tracker("pytorch/pytorch#156784", "open", "allow different dtypes for parameters with gradients"),
        tracker("pytorch/pytorch#196996", "open", "the same reduce-scatter assertion from gradient accumulation with fresh parameters")},
       "On a bf16 base PEFT autocasts an adapter to fp32 unless it is added with autocast_adapter_dtype=False. FSDP's lazy "
       "init checks the dtypes of the parameters trainable at the first forward; a later `set_adapter([a, b])` makes an "
       "adapter of the other dtype trainable too, and the next backward's `foreach_reduce` raises \"FSDP reduce-scatter "
       "expects uniform gradient dtype\" (after which FSDP stays mid-backward: see checkpoint-error-wedges-fsdp).",
       "Users activating adapters of different autocast_adapter_dtype together on a low-precision base under FSDP2.",
       "Give every adapter the same dtype (one autocast_adapter_dtype setting), or shard adapters of each dtype in their own group.",
       "None in torch (feature request pytorch#156784).", ""},
      {"unsynced-grads-reach-next-adapter",
       "A gradient kept on the unsharded copy by an unsynced micro-batch is reduced into the next adapter's step",
       V::Documented, "FSDPModule.set_requires_gradient_sync's docstring: gradient accumulation without communication (pytorch/pytorch#118298)",
       {{L::Torch, "torch/distributed/fsdp/_fully_shard/_fully_shard.py", "FSDPModule.set_requires_gradient_sync",
         "its docstring: accumulate gradients without communication until a synced backward"},
        {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup.post_backward",
         "without gradient sync, keeps each unsharded gradient until a synced backward reduces it"}},
       {tracker("pytorch/pytorch#118298", "closed", "added set_requires_gradient_sync: accumulate unsharded gradients until a synced backward")},
       "With `set_requires_gradient_sync(False)`, `FSDPParamGroup.post_backward` reshards without reducing and leaves "
       "each gradient on U; the next synced post_backward reduces every U that holds one, so an adapter trained in an "
       "earlier micro-batch gets a gradient (and an update) at a step meant for another.",
       "Gradient-accumulation loops that switch adapters between micro-batches.",
       "Do not switch adapters inside an accumulation window.",
       "None upstream.", ""},
      {"checkpoint-error-wedges-fsdp",
       "A raise mid-backward (a CheckpointError, a gradient dtype FSDP's reduce refuses) leaves FSDP in PRE_BACKWARD: no later backward reduces anything",
       V::Documented, "FSDPModule.reset_iter_state's docstring: recovering from an error mid-iteration is the caller's",
       {{L::Torch, "torch/distributed/fsdp/_fully_shard/_fully_shard.py", "FSDPModule.reset_iter_state",
         "resets the iteration state after an error in the middle of an iteration"},
        {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_state.py", "FSDPState._pre_forward",
         "returns early while the state is PRE_BACKWARD"}},
       {tracker("pytorch/pytorch#123857", "closed", "the PRE_BACKWARD early return in FSDPState._pre_forward")},
       "An activation-checkpoint recompute that raises (a flag, merge or r changed between forward and backward) stops "
       "the backward before the root's final callback; `foreach_reduce` raising inside that callback (adapters of two "
       "dtypes trained in one group) stops it part way. Either way FSDP states stay in PRE_BACKWARD and the callback "
       "stays marked queued, every later forward takes `FSDPState._pre_forward`'s early branch, and no later train step "
       "reduces a gradient (silently).",
       "Users of activation checkpointing who change adapters between forward and backward; users who switch to an "
       "adapter of another dtype (PEFT's autocast_adapter_dtype=False) after the first step.",
       "Catch the error and call reset_iter_state() on the root module.",
       "accelerate / Trainer could call reset_iter_state() when a step raises.", ""},
      {"reduce-dtype-unset-after-frozen-forward",
       "A group whose parameters were all frozen at its first forward under a MixedPrecisionPolicy keeps no reduce dtype: "
       "after set_adapter unfreezes an adapter there, its gradient arrives in the compute dtype and the fp32 shard refuses it",
       V::Reported,
       "pytorch/pytorch#186998 (closed); its fix pytorch/pytorch#187376 (closed) is not in torch 2.13.0, which still raises it",
       {{L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup._init_mp_dtypes",
         "derives _orig_dtype and _reduce_dtype from the parameters trainable at lazy init: None when there are none"},
        {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "foreach_reduce",
         "reduces in the reduce dtype (the compute dtype when None) and assigns the result to the shard's grad"}},
       {tracker("pytorch/pytorch#186998", "closed", "mixed precision breaks after unfreezing when the first forward ran frozen"),
        tracker("pytorch/pytorch#187376", "closed", "falls back to the group's floating-point parameters when nothing is trainable at lazy init")},
       "FSDP2 fixes a group's `_orig_dtype` and `_reduce_dtype` at its lazy init from the parameters that require grad "
       "then. With several adapters, a child group may hold only frozen ones at the first forward (the base weight and an "
       "adapter not yet active): both stay None for good. After `set_adapter` makes that adapter trainable, "
       "`foreach_reduce` reduces its gradient in the bf16 compute dtype and assigns it to the fp32 shard; autograd's grad "
       "setter raises (\"attempting to assign a gradient with dtype 'c10::BFloat16' to a tensor with grad_dtype 'Float'\") inside the root's "
       "final callback, which leaves FSDP in PRE_BACKWARD (see checkpoint-error-wedges-fsdp): later steps train nothing.",
       "Users of a bf16 MixedPrecisionPolicy (accelerate's mixed_precision=\"bf16\" under FSDP2) who switch to an adapter "
       "that no group held trainable at the first forward, or who unfreeze layers after a first frozen forward.",
       "Make every adapter trainable (or run one training step) before the first forward, or shard LoRA layers whose "
       "adapters switch into the root's group.",
       "In torch: resolve the dtypes from the group's floating-point parameters when none is trainable (pytorch#187376).", ""},
      {"late-adapter-not-managed-by-fsdp",
       "Adapters added after fully_shard are plain tensors no FSDP group reduces: each rank trains its own copy",
       V::UnsupportedUse,
       "in a plain FSDP2 loop (parameters added after fully_shard); the library path that does it for the user, "
       "transformers' load-time sharding, is handled by its Trainer in transformers 5.24.0",
       {{L::Transformers, "transformers/distributed/mixin.py", "maybe_distribute_model", "applies fully_shard at load time, before PEFT adds adapters"},
        {L::Transformers, "transformers/trainer.py", "Trainer._sync_replicated_trainable_parameters",
         "broadcasts trainable non-DTensor parameters and averages their gradients"}},
       {tracker("huggingface/transformers#48792", "open", "with load-time sharding, N ranks train N different adapters and rank 0's is saved"),
        tracker("huggingface/transformers#48873", "open", "the Trainer branch where the broadcast and gradient averaging belong")},
       "`LoraLayer.update_layer` creates new modules after `fully_shard` ran; no group manages them, so nothing "
       "broadcasts their init or reduces their gradients, and with per-rank data the ranks' copies part at the first step. "
       "In a plain loop that is unsupported use (FSDP2 manages what it sharded); transformers' load-time sharding reaches "
       "it for the user, and its Trainer now broadcasts and averages such parameters.",
       "Loops outside transformers' Trainer on a model transformers sharded at load time.",
       "Add every adapter before fully_shard, or broadcast and all-reduce the new parameters yourself.",
       "None in FSDP2; transformers' Trainer does it (5.24.0), other loops over load-time-sharded models would need the same.", ""},
      {"save-selects-active-only",
       "An adapter_only checkpoint holds the active adapter only, not every loaded one",
       V::ByDesign,
       "accelerate's adapter_only save is of the active adapter; the kept script selects the adapter itself and never calls "
       "accelerate, so it shows no library bug",
       {{L::Accelerate, "accelerate/utils/fsdp_utils.py", "_get_model_state_dict",
         "the non-DCP adapter_only path saves get_peft_model_state_dict(model, adapter_name=model.active_adapter)"}},
       {},
       "accelerate's non-DCP `adapter_only` save (utils/fsdp_utils.py::_get_model_state_dict) writes "
       "`model.active_adapter` only, where PeftModel.save_pretrained saves every adapter by default: a checkpoint of the "
       "adapter being trained.",
       "Multi-adapter users expecting accelerate's adapter_only checkpoint to hold every adapter.",
       "Save with PeftModel.save_pretrained(selected_adapters=None).",
       "None needed; accelerate's docs could say which adapter adapter_only saves.", "adapter_save_selection=all"},
      {"save-skips-checkpointed-layers",
       "Adapters of checkpoint-wrapped layers are missing from the saved adapter state dict (PEFT 0.21)",
       V::Regression, "PEFT 0.21 by huggingface/peft#3490 (the structural key filter); no upstream report found",
       {{L::Peft, "peft/tuners/tuners_utils.py", "_get_tuner_state_dict_key_prefixes",
         "builds the adapter key prefixes from named_modules(), which keep the wrapper's segment"},
        {L::Peft, "peft/tuners/tuners_utils.py", "BaseTuner._get_adapter_state_dict", "keeps only state-dict keys under those prefixes"},
        {L::Torch, "torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py", "_post_state_dict_hook",
         "strips `_checkpoint_wrapped_module.` from the state-dict keys"}},
       {tracker("huggingface/peft#3490", "merged", "moved the adapter state-dict selection to a structural filter over the tuner layers")},
       "`checkpoint_wrapper`'s state-dict hook strips `_checkpoint_wrapped_module.` from the keys. PEFT 0.21's "
       "`_get_adapter_state_dict` keeps the keys under prefixes built from `named_modules()`, which still hold that segment, "
       "so no key of a wrapped layer matches and the save silently leaves those adapters out. Before 0.21 the filter "
       "matched the adapter's name in the key: the release matrix shows no finding on PEFT 0.15.2-0.20.0.",
       "Users combining activation checkpointing (checkpoint_wrapper) with adapter saves on PEFT 0.21.",
       "Save from the unwrapped module, or check the saved keys; PEFT 0.20 does not have it.",
       "Strip the wrapper segment when building the key prefixes in _get_tuner_state_dict_key_prefixes.", "save_key_prefixes=wrappers_stripped"},
      {"rank-divergent-op",
       "An adapter op run on some ranks only: the ranks' collectives or adapter state diverge",
       V::Misuse, "every rank must run the same adapter ops in the same order",
       {{L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup.post_backward",
         "each group's reduce-scatter is a collective every rank must join"}},
       {},
       "An op run on one rank only leaves the ranks with different adapters, merges or flags; the next collective "
       "hangs, or pairs with a peer's of another size (gloo aborts a rank), or, of the same size and dtype, pairs "
       "with another group or other parameters: gloo completes it cross-paired and each rank goes on with its peers' "
       "bytes of another tensor (silent corruption). No library fix applies.",
       "Distributed code that switches adapters under a rank condition.",
       "Run adapter ops on every rank.", "None.", ""},
  };
  return table;
}

}  // namespace fsdpsim
