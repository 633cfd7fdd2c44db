// Names the pinned torch / PEFT refuse or mis-handle (model/vocab/name_rules.cpp):
// refused at parse time at the name's own column with the exact message, legal
// awkward names accepted, and the Python-side predicates the script export reads.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "model/vocab/name_rules.hpp"
#include "model/vocab/seq.hpp"
#include "properties/vocab/seq_test_header.hpp"

namespace fsdpsim {
namespace {

using namespace seq_test;

struct RefusedName {
  std::string name;
  std::string text;
  int line;
  int column;
  std::string message;  // the whole message after "bad.seq:LINE:COLUMN: "
};

std::string module_attr(const std::string& n) {
  return "'" + n + "' is an attribute of every torch module and cannot name a layer (torch's Module.add_module "
         "refuses it: attribute '" + n + "' already exists)";
}
std::string module_dict_attr(const std::string& n) {
  return "'" + n + "' is an attribute of torch's nn.ModuleDict and cannot name an adapter (PEFT keeps adapters in "
         "ModuleDicts, whose add_module refuses it: attribute '" + n + "' already exists)";
}
std::string key_part(const std::string& n) {
  return "'" + n + "' cannot name an adapter: it is part of every adapter's state-dict keys (L.lora_A.NAME.weight), "
         "and PEFT's save drops the keys that contain another adapter's name "
         "(peft/utils/save_and_load.py::_filter_state_dict_for_adapter_name)";
}
const char* kShared = "a layer and an adapter may not share a name (PEFT's save drops the keys that contain another "
                      "adapter's name, here the layer's: peft/utils/save_and_load.py::_filter_state_dict_for_adapter_name)";

std::vector<RefusedName> refused_names() {
  return {
      // layers: torch's Module attributes (a method would shadow the child, `training` breaks train())
      {"LayerForward", head(4, "layer forward 10 20"), 4, 7, module_attr("forward")},
      {"LayerTraining", head(4, "layer training 10 20"), 4, 7, module_attr("training")},
      {"LayerTo", head(4, "layer to 10 20"), 4, 7, module_attr("to")},
      {"LayerModules", head(4, "layer _modules 10 20"), 4, 7, module_attr("_modules")},
      {"LayerDunderClass", head(4, "layer __class__ 10 20"), 4, 7, module_attr("__class__")},
      // layers: what PEFT sets on or reads off the base model
      {"LayerPeftConfig", head(4, "layer peft_config 10 20"), 4, 7,
       "'peft_config' cannot name a layer: PEFT stores its adapters' configs on the base model under that name "
       "(peft/tuners/tuners_utils.py::BaseTuner.__init__)"},
      {"LayerConfig", head(4, "layer config 10 20"), 4, 7,
       "'config' cannot name a layer: PEFT reads the base model's `config` as its model config "
       "(peft/tuners/tuners_utils.py::BaseTuner.get_model_config)"},
      {"LayerTiedWeights", head(4, "layer _tied_weights_keys 10 20"), 4, 7,
       "'_tied_weights_keys' cannot name a layer: PEFT reads the base model's `_tied_weights_keys` as the names of "
       "its tied weights (peft/utils/other.py::_get_module_names_tied_with_embedding)"},
      {"LayerInputEmbeddings", head(4, "layer get_input_embeddings 10 20"), 4, 7,
       "'get_input_embeddings' cannot name a layer: PEFT calls the base model's `get_input_embeddings()` when it "
       "has one (peft/peft_model.py::PeftModel._prepare_model_for_gradient_checkpointing)"},
      {"LayerLora", head(5, "layer my_lora_layer 20 2"), 5, 7,
       "layer names may not contain 'lora_' (PEFT treats such parameters as adapter weights), got 'my_lora_layer'"},
      // adapters: nn.ModuleDict attributes (PEFT's lora_A / lora_B / modules_to_save containers)
      {"AdapterKeys", head(7, "adapter keys targets=lin1"), 7, 9, module_dict_attr("keys")},
      {"AdapterTraining", head(7, "adapter training targets=lin1"), 7, 9, module_dict_attr("training")},
      {"AdapterForward", head(7, "adapter forward targets=lin1"), 7, 9, module_dict_attr("forward")},
      {"AdapterUpdate", head(7, "adapter update targets=lin1"), 7, 9, module_dict_attr("update")},
      {"AdapterGetitem", head(7, "adapter __getitem__ targets=lin1"), 7, 9, module_dict_attr("__getitem__")},
      // adapters: the parts of every adapter's state-dict keys
      {"AdapterModel", head(7, "adapter model targets=lin1"), 7, 9, key_part("model")},
      {"AdapterLoraA", head(7, "adapter lora_A targets=lin1"), 7, 9, key_part("lora_A")},
      {"AdapterWeight", head(7, "adapter weight targets=lin1"), 7, 9, key_part("weight")},
      {"AdapterBias", head(7, "adapter bias targets=lin1"), 7, 9, key_part("bias")},
      {"AdapterModulesToSave", head(7, "adapter modules_to_save targets=lin1"), 7, 9, key_part("modules_to_save")},
      {"AdapterCheckpointChild", head(7, "adapter _checkpoint_wrapped_module targets=lin1"), 7, 9,
       key_part("_checkpoint_wrapped_module")},
      // a layer and an adapter of one name, whichever comes second
      {"AdapterNamedLikeLayer", head(7, "adapter lin1 targets=lin1"), 7, 9,
       std::string("adapter 'lin1' has the name of layer 'lin1': ") + kShared},
      {"LayerNamedLikeAdapter", head(11, "layer other 2 2"), 11, 7,
       std::string("layer 'other' has the name of adapter 'other': ") + kShared},
  };
}

void PrintTo(const RefusedName& c, std::ostream* os) { *os << c.name; }

class NameRefused : public ::testing::TestWithParam<RefusedName> {};

TEST_P(NameRefused, ExactMessageAtTheName) {
  const RefusedName& c = GetParam();
  try {
    SeqFile f = parse_seq(c.text, "bad.seq");
    ADD_FAILURE() << "parsed without error:\n" << c.text;
  } catch (const SourceError& e) {
    EXPECT_EQ(std::string(e.what()),
              "bad.seq:" + std::to_string(c.line) + ":" + std::to_string(c.column) + ": " + c.message);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, NameRefused, ::testing::ValuesIn(refused_names()),
                         [](const ::testing::TestParamInfo<RefusedName>& i) { return i.param.name; });

// Every attribute of a torch module is refused for a layer and an adapter, and every
// ModuleDict one for an adapter (the upstream test checks these lists against torch).
TEST(NameRules, EveryTorchAttributeIsRefused) {
  for (const auto& n : torch_module_attributes()) {
    EXPECT_NE(layer_name_refusal(n), "") << n;
    EXPECT_NE(adapter_name_refusal(n), "") << n;
  }
  for (const auto& n : torch_module_dict_extra_attributes()) EXPECT_NE(adapter_name_refusal(n), "") << n;
  EXPECT_GT(torch_module_attributes().size(), 100u);
}

// Awkward but legal: parsed, printed and parsed back unchanged.
TEST(NameRules, AwkwardLegalNamesParse) {
  const std::string text =
      "world 2\nlayer order 10 10\nlayer input_dtype 10 10\nlayer class 10 10\nlayer lin-0 10 10\nlayer __w 10 10\n"
      "layer get 10 2\nadapter base_layer targets=order,__w\nadapter lora_x targets=class modules_to_save=lin-0\n"
      "adapter default targets=get\nfully_shard root\n---\ntrain_step\nsave_adapters\n";
  SeqFile f = parse_seq(text, "ok.seq");
  ASSERT_EQ(f.scenario.layers.size(), 6u);
  EXPECT_EQ(f.scenario.adapters[0].name, "base_layer");
  EXPECT_EQ(print_seq(parse_seq(print_seq(f))), print_seq(f));
}

// Files built in code (the generator, the shrinker) go through validate(): a refused name
// never reaches the model from there either.
TEST(NameRules, ValidateRefusesNamesBuiltInCode) {
  const auto refused = [](auto edit) {
    SeqFile f = parse_seq(head(), "ok.seq");
    edit(f.scenario);
    try {
      validate(f, "built");
    } catch (const SourceError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused([](Scenario& s) { s.adapters[1].name = "keys"; }).find("attribute of torch's nn.ModuleDict"),
            std::string::npos);
  EXPECT_NE(refused([](Scenario& s) { s.layers[0].name = "to"; }).find("attribute of every torch module"),
            std::string::npos);
  EXPECT_NE(refused([](Scenario& s) { s.layers[0].name = "other"; }).find("may not share a name"), std::string::npos);
  EXPECT_NE(refused([](Scenario& s) { s.adapters[1].name = "a.b"; }).find("is not an adapter name"), std::string::npos);
  EXPECT_EQ(refused([](Scenario&) {}), "");
}

TEST(NameRules, PythonPredicates) {
  for (const char* n : {"lin0", "order", "_x", "match", "__init__", "__w"}) EXPECT_TRUE(is_python_identifier(n)) << n;
  for (const char* n : {"class", "lin-0", "None", "lambda", "9a", ""}) EXPECT_FALSE(is_python_identifier(n)) << n;
  for (const char* n : {"lin0", "_x", "__init__", "match", "___", "__", "_"}) EXPECT_TRUE(is_python_attribute_safe(n)) << n;
  // `self.__w` inside a class body reads `self._Net__w`
  for (const char* n : {"__w", "__w_", "__w__x", "class", "lin-0", "None"}) EXPECT_FALSE(is_python_attribute_safe(n)) << n;
}

}  // namespace
}  // namespace fsdpsim
