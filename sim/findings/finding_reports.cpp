// The reports' table (finding_reports.hpp): one row per upstream fix site and owner.
#include "sim/findings/finding_reports.hpp"

#include <algorithm>
#include <map>

#include "model/vocab/enum_names.hpp"

namespace fsdpsim {
namespace {

using L = UpstreamLibrary;

}  // namespace

const char* report_action_word(ReportAction a) { return enum_names<ReportAction>("file", "follow-up", "none")[a]; }

const std::vector<FindingReport>& finding_reports() {
  static const std::vector<FindingReport> table = {
      {"flag-on-copy", L::Peft,
       "FSDP2: PEFT sets requires_grad on the unsharded parameters a no_grad eval leaves registered; the next reshard drops it",
       {L::Peft, "peft/tuners/tuners_utils.py", "set_adapter",
        "the module-level helper PeftModel.set_adapter and base_model.set_adapter([..]) both end in, and "
        "BaseTuner._enable_adapter_layers / delete_adapter beside it: reshard every FSDP2 module under the owning "
        "PeftModel before setting the flags"},
       "torch FSDPParam.to_sharded (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): carry the unsharded parameter's "
       "requires_grad over to the sharded one at reshard, as FSDP1 did for its flat parameter (pytorch/pytorch#104186, #105371)",
       {"flag-on-copy/set_adapter", "flag-on-copy/base_model.set_adapter", "flag-on-copy/disable_adapter-enter",
        "flag-on-copy/disable_adapter-exit", "flag-on-copy/delete_adapter-fallback"},
       "After `set_adapter(\"other\")` (or entering/leaving `disable_adapter()`, or deleting the active adapter) under FSDP2, "
       "the following training steps train the newly selected adapters.",
       "The requires_grad change lands on the unsharded parameters a no_grad eval left registered; the next reshard "
       "registers the shards with their old flags, so later steps train the previous adapter or raise \"element 0 of "
       "tensors does not require grad\".",
       "flag-on-copy/set_adapter"},
      {"weight-on-copy", L::Peft,
       "FSDP2: LoRA merge/unmerge edit the unsharded base weight a no_grad eval leaves registered; the next reshard drops the edit",
       {L::Peft, "peft/tuners/lora/layer.py", "Linear.merge",
        "and Linear.unmerge, reached from merge_adapter, unmerge_adapter, set_adapter and a disabled forward: reshard "
        "the owning FSDP2 module first, or refuse to edit an unsharded weight"},
       "torch FSDPParam.to_sharded: write an edited unsharded parameter back to its shard (by design it does not: "
       "pytorch/pytorch#129229)",
       {"weight-on-copy/merge-unmerge", "weight-on-copy/disabled-forward"},
       "After merge_adapter() then unmerge_adapter() under FSDP2 the base weight's shards equal the original weights.",
       "The merge (or unmerge) edits the unsharded copy; the reshard drops it, so the shards miss the delta while the "
       "layer lists it merged, or keep it while nothing is listed.",
       "weight-on-copy/merge-unmerge"},
      {"dora-data-assign-on-shard", L::Peft,
       "FSDP2: DoRA's merge assigns `weight.data` on the sharded DTensor, which ignores it: merged_adapters lists the "
       "adapter while the weights stay unmerged",
       {L::Peft, "peft/tuners/lora/variants.py", "DoraLinearVariant.merge_unsafe",
        "and the `weight.data = ...` assignments of Linear.unmerge and Linear.merge(safe_merge=True): write the new "
        "weight in place (`copy_` under no_grad)"},
       "torch's DTensor `.data` setter (torch/distributed/tensor/_api.py): raise instead of leaving the local shard as it "
       "was, or document it (pytorch/pytorch#157391)",
       {"dora-data-assign-on-shard"},
       "After merge_adapter() on an FSDP2 model with DoRA adapters, the merged forward equals the unmerged one.",
       "The merge leaves every shard as it was while merged_adapters lists the adapter: the forward runs the base weight "
       "alone.",
       "dora-data-assign-on-shard"},
      {"optimizer-checkpoint-while-unsharded", L::Accelerate,
       "FSDP2: saving the optimizer after a no_grad eval raises KeyError: accelerate's root stays unsharded and DCP maps "
       "parameters by identity",
       {L::Accelerate, "accelerate/utils/fsdp_utils.py", "save_fsdp_optimizer", "and load_fsdp_optimizer: reshard every FSDP2 module first"},
       "torch _get_optim_state_dict (torch/distributed/checkpoint/state_dict.py): map an FSDP2 module's parameters "
       "through their sharded parameters, whichever are registered",
       {"optimizer-checkpoint-while-unsharded"},
       "Saving the optimizer state after an evaluation pass succeeds.",
       "get_optimizer_state_dict raises KeyError: the module registers the unsharded parameters left by the eval while the "
       "optimizer holds the shards.",
       "optimizer-checkpoint-while-unsharded"},
      {"optimizer-holds-deleted-adapter", L::Peft, "delete_adapter leaves the optimizer holding the deleted parameters",
       {L::Peft, "peft/peft_model.py", "PeftModel.delete_adapter", "could warn when it deletes parameters that require grad"}, "",
       {"optimizer-holds-deleted-adapter"},
       "A checkpoint of the optimizer after delete_adapter succeeds.", "DCP raises KeyError for the deleted parameters.",
       "optimizer-holds-deleted-adapter"},
      {"save-keeps-local-shard", L::Peft,
       "FSDP2: get_peft_model_state_dict returns each rank's local shard, so save_pretrained writes a partial adapter",
       {L::Peft, "peft/utils/save_and_load.py", "get_peft_model_state_dict", "gather FSDP2 DTensors as it gathers tensor-parallel ones"},
       "accelerate gathers in its own FULL_STATE_DICT path already (huggingface/accelerate#4206); PEFT's direct save does not",
       {"save-keeps-local-shard"},
       "The saved adapter holds the full tensors; a reload restores every row.",
       "Each rank's state dict holds its local rows; the saved file holds rank 0's slice.", "save-keeps-local-shard"},
      {"placement-differs-across-ranks", L::Peft,
       "cpu_ram_efficient_loading: a second adapter stays on CPU / another dtype on some ranks; FSDP's prepare hangs",
       {L::Peft, "peft/tuners/tuners_utils.py", "BaseTunerLayer._move_adapter_to_device_of_base_layer",
        "check only this adapter's parameters for the meta device, not the whole container's"},
       "", {"placement-differs-across-ranks"},
       "Every rank holds every adapter on the base layer's device and dtype before accelerate.prepare.",
       "Ranks other than 0 keep the second adapter on CPU or in another dtype; prepare's broadcast hangs, aborts a "
       "rank or fills its copy part-way.",
       "placement-differs-across-ranks"},
      {"delta-weight-on-local-shard", L::Peft, "FSDP2: ParamWrapper.get_delta_weight reshapes the local shard of sharded LoRA weights",
       {L::Peft, "peft/tuners/lora/layer.py", "ParamWrapper.get_delta_weight", "compute the delta from the full tensors"}, "",
       {"delta-weight-on-local-shard"}, "get_delta_weight returns the full expert delta under FSDP2.",
       "It reshapes the local rows: a shape error or a delta that is not the layer's.", "delta-weight-on-local-shard"},
      {"param-wrapper-single-expert", L::Peft, "ParamWrapper with one expert returns Linear's (out, in) delta for a (1, in, out) weight",
       {L::Peft, "peft/tuners/lora/layer.py", "ParamWrapper.get_delta_weight", "shape the E = 1 delta like the parameter"}, "",
       {"param-wrapper-single-expert"}, "A single-expert target_parameters layer merges and runs like a multi-expert one.",
       "Its delta has Linear's shape: the forward raises a broadcasting error, and a square layer merges the transposed delta.",
       "param-wrapper-single-expert"},
      {"enable-ignores-inference-mode", L::Peft, "enable_adapters makes an inference_mode (frozen) adapter trainable",
       {L::Peft, "peft/tuners/tuners_utils.py", "BaseTuner._enable_adapter_layers",
        "freeze again the active adapters whose config has inference_mode (BaseTunerLayer.enable_adapters does not know it)"}, "",
       {"enable-ignores-inference-mode"}, "An adapter loaded frozen stays frozen after a disable_adapter() block.",
       "It requires grad after the block.", "enable-ignores-inference-mode"},
      {"disable-exit-not-scoped", L::Peft, "disable_adapter() restores the enabled state, not the active adapters",
       {L::Peft, "peft/peft_model.py", "PeftModel.disable_adapter", "by design since peft#3565; its docstring could say so"}, "",
       {"disable-exit-not-scoped"}, "(by design) Adapter changes made inside the block persist after it.",
       "The adapter active before the block is not active after a set_adapter inside it.", "disable-exit-not-scoped"},
      {"delete-fallback-per-layer", L::Peft,
       "delete_adapter picks the fallback per layer, against its docstring's \"same adapter on all layers\"",
       {L::Peft, "peft/tuners/tuners_utils.py", "delete_adapter",
        "the module-level helper: apply the first layer's fallback to every layer (BaseTunerLayer.delete_adapter picks per layer)"},
       "", {"delete-fallback-per-layer"},
       "Deleting the active adapter makes one remaining adapter active on every layer.",
       "Layers holding different adapters each fall back to their own first one, and a frozen adapter becomes trainable.",
       "delete-fallback-per-layer"},
      {"raises-in.load_adapters", L::Peft, "set_peft_model_state_dict raises midway for a checkpoint naming a deleted adapter",
       {L::Peft, "peft/utils/save_and_load.py", "set_peft_model_state_dict", "documented: the adapters must be in place"}, "",
       {"raises-in/load_adapters"}, "(documented) A load needs the adapters in place first.",
       "KeyError after the adapters before it were loaded.", "raises-in/load_adapters"},
      {"training-a-merged-adapter", L::Peft, "An optimizer step while merged leaves the old delta in the base weight",
       {L::Peft, "peft/tuners/lora/layer.py", "Linear.merge", "could warn when A and B require grad"}, "",
       {"training-a-merged-adapter"}, "(outside the contract) Unmerge before stepping the optimizer.",
       "The unmerge subtracts a delta other than the merged one.", "training-a-merged-adapter"},
      {"backward-of-merged-forward", L::Peft, "A backward of a merged forward has no LoRA path",
       {L::Peft, "peft/tuners/lora/layer.py", "Linear.forward", "misuse: merging is for inference"}, "", {"backward-of-merged-forward"},
       "(outside the contract) A merged forward carries no adapter gradient.", "no_grad_fn after the unmerge.", "backward-of-merged-forward"},
      {"delta-weight-from-stale-copy", L::Torch, "FSDP2 exposes the registered copy, which an optimizer step does not update",
       {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param.py", "FSDPParam.to_unsharded", "by design (pytorch#144289)"}, "",
       {"delta-weight-from-stale-copy"}, "(by design) Reshard after the optimizer step before reading parameters.",
       "get_delta_weight reads A and B from before the step.", "delta-weight-from-stale-copy"},
      {"half-added-adapter", L::Peft, "A refused add_adapter leaves the adapter in earlier layers and the flags changed",
       {L::Peft, "peft/tuners/tuners_utils.py", "BaseTuner.inject_adapter", "roll back on failure, restoring the requires_grad snapshot"},
       "", {"half-added-adapter"}, "A refused add_adapter leaves the model as it was.",
       "Earlier layers keep the adapter and the active adapter's flags changed.", "half-added-adapter"},
      {"mixed-adapter-dtypes-in-one-group", L::Torch, "FSDP2 refuses trainable parameters of two dtypes in one group",
       {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup._init_mp_dtypes",
        "and foreach_reduce: one dtype per group, a documented requirement; pytorch#156784 asks to relax it"},
       "PEFT: keep an adapter, the other active adapters and its modules_to_save copies in one dtype on a low-precision base",
       {"mixed-adapter-dtypes-in-one-group", "raises-in/post_backward"}, "(documented) One dtype among a group's trainable parameters.",
       "AssertionError at FSDP's lazy init, or in the backward's reduce-scatter when the second dtype becomes trainable later.",
       "mixed-adapter-dtypes-in-one-group"},
      {"unsynced-grads-reach-next-adapter", L::Torch, "An unsynced micro-batch's gradient is reduced into the next synced step",
       {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup.post_backward", "documented accumulation"},
       "", {"unsynced-grads-reach-next-adapter"}, "(documented) Gradients accumulate until a synced backward.",
       "An adapter trained in an earlier micro-batch is updated at a later adapter's step.", "unsynced-grads-reach-next-adapter"},
      {"checkpoint-error-wedges-fsdp", L::Torch, "A raise mid-backward leaves FSDP2 in PRE_BACKWARD until reset_iter_state",
       {L::Torch, "torch/distributed/fsdp/_fully_shard/_fully_shard.py", "FSDPModule.reset_iter_state", "documented recovery"},
       "accelerate / transformers Trainer: call reset_iter_state() when a step raises", {"checkpoint-error-wedges-fsdp"},
       "(documented) The caller resets FSDP after an error mid-iteration.", "No later backward reduces a gradient.",
       "checkpoint-error-wedges-fsdp"},
      {"reduce-dtype-unset-after-frozen-forward", L::Torch,
       "FSDP2 mixed precision: a group all frozen at its first forward reduces later gradients in the compute dtype",
       {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup._init_mp_dtypes",
        "resolve the dtypes from the group's floating-point parameters when none is trainable (pytorch#187376)"},
       "", {"reduce-dtype-unset-after-frozen-forward"},
       "An adapter unfrozen after the first forward trains under the policy's reduce_dtype.",
       "Its gradient arrives in bf16 and the fp32 shard's grad setter raises; later steps train nothing.",
       "reduce-dtype-unset-after-frozen-forward"},
      {"late-adapter-not-managed-by-fsdp", L::Transformers,
       "Adapters attached after load-time fully_shard are replicated tensors no FSDP group reduces",
       {L::Transformers, "transformers/trainer.py", "Trainer._sync_replicated_trainable_parameters",
        "handled in Trainer (5.24.0); in a plain FSDP2 loop adding parameters after fully_shard is unsupported"},
       "", {"late-adapter-not-managed-by-fsdp"}, "(unsupported in a plain loop) Add adapters before fully_shard.",
       "Each rank trains its own copy of the adapter.", "late-adapter-not-managed-by-fsdp"},
      {"save-selects-active-only", L::Accelerate, "accelerate's adapter_only checkpoint holds the active adapter only",
       {L::Accelerate, "accelerate/utils/fsdp_utils.py", "_get_model_state_dict", "by design: a checkpoint of the trained adapter"}, "",
       {"save-selects-active-only"}, "(by design) adapter_only saves the active adapter.", "Other adapters are not in the checkpoint.",
       "save-selects-active-only"},
      {"save-skips-checkpointed-layers", L::Peft,
       "PEFT 0.21 regression: get_peft_model_state_dict drops the adapters of checkpoint_wrapper-wrapped layers",
       {L::Peft, "peft/tuners/tuners_utils.py", "_get_tuner_state_dict_key_prefixes",
        "build the prefixes from the state-dict names (without the wrapper's segment)"},
       "", {"save-skips-checkpointed-layers"},
       "The saved adapter state dict holds every adapter weight, as on PEFT 0.20.",
       "The adapters of layers wrapped in checkpoint_wrapper are missing from it, silently.", "save-skips-checkpointed-layers"},
      {"rank-divergent-op", L::Torch, "An adapter op run on some ranks only desynchronizes FSDP's collectives",
       {L::Torch, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup.post_backward", "misuse: every rank must join"},
       "", {"rank-divergent-op"}, "(misuse) Every rank runs the same adapter ops.", "The ranks' collectives hang or pair up wrongly.",
       "rank-divergent-op"},
  };
  return table;
}

const FindingReport* report_of(const std::string& root_cause_id) {
  for (const auto& r : finding_reports())
    if (std::find(r.entry_points.begin(), r.entry_points.end(), root_cause_id) != r.entry_points.end()) return &r;
  return nullptr;
}

const FindingReport* find_report(const std::string& id) {
  for (const auto& r : finding_reports())
    if (r.id == id) return &r;
  return nullptr;
}

RootVerdict report_verdict(const FindingReport& r) {
  // A bug nobody upstream knows of decides the report's action: it names the report first.
  RootVerdict v = RootVerdict::Unreviewed, unreported = RootVerdict::Unreviewed;
  bool any_unreported = false;
  for (const auto& id : r.entry_points) {
    const RootVerdict e = root_cause_entry(id).verdict;
    v = std::min(v, e);
    if (is_unreported(e)) unreported = any_unreported ? std::min(unreported, e) : e, any_unreported = true;
  }
  return any_unreported ? unreported : v;
}

ReportAction report_action(const FindingReport& r) {
  bool any_bug = false;
  for (const auto& id : r.entry_points) {
    const RootVerdict v = root_cause_entry(id).verdict;
    if (is_unreported(v)) return ReportAction::File;
    any_bug = any_bug || (is_bug(v) && v != RootVerdict::FixedIn);
  }
  return any_bug ? ReportAction::FollowUp : ReportAction::Closed;
}

std::string report_page_name(const FindingReport& r) { return "report-" + r.id + ".md"; }

std::string candidate_patch_name(const FindingReport& r) { return r.id + ".patch"; }

const CandidateFix* candidate_fix(const FindingReport& r) {
  if (r.owner != UpstreamLibrary::Peft || report_action(r) == ReportAction::Closed) return nullptr;
  static const std::map<std::string, CandidateFix> fixes = {
      {"flag-on-copy", {true, ""}},
      {"save-keeps-local-shard", {true, ""}},
      {"delta-weight-on-local-shard", {true, ""}},
      {"param-wrapper-single-expert", {true, ""}},
      {"delete-fallback-per-layer", {true, ""}},
      {"save-skips-checkpointed-layers", {true, ""}},
      {"half-added-adapter", {true, ""}},
      {"enable-ignores-inference-mode", {true, ""}},
      {"weight-on-copy",
       {false,
        "the fix is a design decision, not a small diff: a merge under FSDP2 must either edit each rank's shard (reshard "
        "first, then merge into the sharded parameter) or refuse to edit a weight FSDP2 holds unsharded, and a disabled "
        "forward's unmerge runs inside forward, where only the unsharded copy exists. The alternative site is torch's "
        "FSDPParam.to_sharded, which by design does not write an edited unsharded parameter back (pytorch/pytorch#129229)"}},
      {"dora-data-assign-on-shard",
       {false,
        "not written yet: the change is small (in-place `copy_` under no_grad where variants.py and layer.py assign "
        "`.data`; measured to land the merge at world 2) but touches every `.data =` merge path, whose plain-tensor "
        "behaviour (a dtype change on assignment) a maintainer should weigh"}},
      {"placement-differs-across-ranks",
       {false,
        "not written: the second adapter is created while ranks other than 0 hold the base model on the meta device, and "
        "whether PEFT (BaseTunerLayer._move_adapter_to_device_of_base_layer, checking the whole container for meta) or "
        "accelerate's fsdp2_load_full_state_dict should place it is for the two libraries' maintainers to settle"}},
  };
  static const CandidateFix unknown{false, "none written yet"};
  const auto it = fixes.find(r.id);
  return it == fixes.end() ? &unknown : &it->second;
}

}  // namespace fsdpsim
