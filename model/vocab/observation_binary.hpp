// The observation as bytes (model/vocab/byte_codec.hpp), walked through the
// one field list (FSDPSIM_OBSERVATION_FIELDS): what a real rank sends its
// observer, and what the trace hash is computed over.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim {

void append_binary(std::string& out, const Observation& o);
// Reads one observation at *pos; false at a truncated or malformed record.
bool read_binary(const std::string& in, size_t* pos, Observation* o);

// The trace hash: FNV-1a's multiply-xor over 64-bit words of every field of
// every observation, in order (the words append_binary writes). The same
// observations give the same hash on every backend.
uint64_t observations_hash(const std::vector<Observation>& obs);

}  // namespace fsdpsim
