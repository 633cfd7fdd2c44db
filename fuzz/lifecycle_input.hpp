// Structure-aware inputs for the lifecycle fuzzer: every byte string decodes
// to a valid scenario and op sequence, and the mutator edits op lists, so
// inputs stay meaningful and every artifact prints as `.seq` text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/vocab/seq.hpp"

namespace fsdpsim::fuzz {

// `.seq` text parses as itself; anything else is read with FuzzedDataProvider:
// world 1-4, layers, adapters, fully_shard plan, profile and switches, ops with `@R`.
SeqFile decode(const uint8_t* data, size_t size);

// decode, remembered per input: libFuzzer hands the mutator and then the target
// the same few thousand corpus texts over and over, and parsing one costs about
// as much as simulating it. The reference stays valid until the next call.
const SeqFile& decode_cached(const uint8_t* data, size_t size);

// Insert, delete, swap or change one op (sometimes a scenario knob), as text;
// `decoded`, when given, receives the file the text decodes to.
std::string mutate(const SeqFile& f, uint32_t seed, SeqFile* decoded = nullptr);

// Primes decode_cached with mutate's result: libFuzzer runs the mutator's text
// next, and parsing it back costs as much as a short run. Kept only when
// decode reads the text as `.seq` (world <= 4, <= 3 layers, <= 40 ops), where
// keep_valid leaves mutate's valid file as it is (fuzz/lifecycle_input_test.cpp).
// True when kept.
bool remember_decoded(const std::string& text, SeqFile f);

}  // namespace fsdpsim::fuzz
