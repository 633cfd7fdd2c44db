// seq_parser_fuzzer: arbitrary bytes into the `.seq` parser and printer. Never
// a crash or a hang; whenever x parses, parse(print(parse(x))) == parse(x) and
// printing is a fixed point.
#include <cstdlib>
#include <iostream>

#include "model/vocab/seq.hpp"

using namespace fsdpsim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  SeqFile f;
  try {
    f = parse_seq(text, "<input>");
  } catch (const SourceError&) {
    return 0;  // a clear error is the right answer to bad input
  }
  std::string printed = print_seq(f);
  SeqFile again;
  try {
    again = parse_seq(printed, "<printed>");
  } catch (const SourceError& e) {
    std::cerr << "printed text does not parse: " << e.what() << "\n" << printed;
    std::abort();
  }
  if (!(again == f) || print_seq(again) != printed) {
    std::cerr << "round trip differs:\n" << printed << "---- vs ----\n" << print_seq(again);
    std::abort();
  }
  return 0;
}
