// The words the scenario grammar knows (seq_parser.cpp): its directives (with "---") and the
// adapter line's options, for the parser's suggestions and for the generator's coverage table,
// which must know every one.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

const std::vector<std::string>& directive_names();
const std::vector<std::string>& adapter_option_names();

}  // namespace fsdpsim
