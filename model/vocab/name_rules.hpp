// Which layer and adapter names the pinned libraries (torch 2.13, PEFT 0.21.2)
// refuse or mis-handle, and why: the one place the parser, the docs and the
// upstream backend's script export read these rules from
// (docs/guide/seq-format.md, "Names and input rules").
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

// NAME = [A-Za-z_][A-Za-z0-9_-]*, at most 64 characters: the .seq grammar's names.
bool is_name(const std::string& s);

// Why `name` cannot name a layer or an adapter on the pinned libraries (the rule
// and the upstream function that enforces or breaks on it), or "" when it can.
// `is_name` is checked first by the caller; these are the further rules.
std::string layer_name_refusal(const std::string& name);
std::string adapter_name_refusal(const std::string& name);

// Why a layer and an adapter may not share `name` (PEFT's adapter save drops
// every key that spells another adapter's name), for whichever is declared second.
std::string shared_name_refusal(const std::string& name, bool adapter_declared_second);

// Whether a (legal) name is also a Python identifier that is not a keyword, so a
// script may spell it as an attribute (`self.NAME`) rather than through
// getattr/setattr or a string key. '-' and keywords such as `class` are legal
// .seq names but not identifiers; names starting with "__" are identifiers that
// Python mangles inside a class body.
bool is_python_identifier(const std::string& name);
bool is_python_attribute_safe(const std::string& name);

// The attribute names of every torch.nn.Module / nn.ModuleDict instance on the
// pinned torch (dir() of each, restricted to NAMEs), sorted: the upstream test
// compares them with the installed torch.
const std::vector<std::string>& torch_module_attributes();
const std::vector<std::string>& torch_module_dict_extra_attributes();

}  // namespace fsdpsim
