// The words the scenario grammar knows (seq_parser.cpp): its directives (with "---") and the
// adapter line's options, for the parser's suggestions and for the generator's coverage table,
// which must know every one.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

const std::vector<std::string>& directive_names();
const std::vector<std::string>& adapter_option_names();
// The directives of real-model scenarios (`model`, `fully_shard_plan`): parsed and printed, but no
// backend runs such a file yet, so the generator cannot draw them and the coverage table leaves
// them out (docs/design/known-limits.md#real-models). directive_names() plus these: every directive.
const std::vector<std::string>& model_directive_names();
std::vector<std::string> all_directive_names();

}  // namespace fsdpsim
