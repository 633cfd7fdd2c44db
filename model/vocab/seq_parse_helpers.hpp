// What the `.seq` parser's two files share (seq_parser.cpp: the header's directives and the
// file; seq_op_parser.cpp: the op lines and their expectations): the hints an error gives and
// the readers of numbers, name lists and key=value tokens. Used by those two files only.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/vocab/seq.hpp"
#include "model/vocab/seq_lexer.hpp"

namespace fsdpsim::seq_parse {

// " (KINDs declared above: a, b; did you mean 'a'?)": what an unknown name could
// have been, so the message gives the fix.
std::string declared_hint(const std::string& word, const std::vector<std::string>& names, const char* kind);
std::string layer_hint(const Scenario& s, const std::string& word, bool with_root = false);
std::vector<std::string> all_op_names();
// What a rejected name breaks, for the error message.
std::string name_rule(const std::string& s);
// `s` is the end of token `t` (`r=` VALUE) unless `at` says where it starts: the column is the value's own.
int64_t parse_int(seq_lexer::LineParser& lp, const seq_lexer::Token& t, const std::string& s, int64_t lo, int64_t hi,
                  const char* what, size_t at = std::string::npos);
// "a,b" or "[a,b]" or "{a,b}" (empty allowed only for the bracketed forms).
std::vector<std::string> parse_names(seq_lexer::LineParser& lp, const seq_lexer::Token& t, std::string s, const char* what);
std::pair<std::string, std::string> split_kv(seq_lexer::LineParser& lp, const seq_lexer::Token& t, const char* what);

// Real-model scenarios (seq_model_parser.cpp): the `model` and `fully_shard_plan` lines, an
// adapter's `targets=` as PEFT target_modules, and a `fully_shard` line's dotted module paths.
void parse_model(seq_lexer::LineParser& lp, Scenario& s, const seq_lexer::Token& kw);
void parse_fully_shard_plan(seq_lexer::LineParser& lp, Scenario& s, const seq_lexer::Token& kw);
std::vector<std::string> parse_model_targets(seq_lexer::LineParser& lp, const Scenario& s, const seq_lexer::Token& t,
                                             const std::string& v);
std::vector<std::string> parse_model_shard_modules(seq_lexer::LineParser& lp, const Scenario& s, const seq_lexer::Token& mods);

// One op line after `---` (seq_op_parser.cpp), and an `expect` clause, on the op line or on a
// line of its own, added to `op`.
Op parse_op_line(seq_lexer::LineParser& lp, const Scenario& s);
void parse_expects(seq_lexer::LineParser& lp, Op& op, const Scenario& s);

}  // namespace fsdpsim::seq_parse
