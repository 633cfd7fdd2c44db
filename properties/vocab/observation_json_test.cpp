// Observation JSON lines read back: print_json -> parse_observation_json is the
// identity on every observation the model produces for the corpus, and
// malformed lines fail with a message naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "model/vocab/json_reader.hpp"
#include "model/vocab/observation_json.hpp"
#include "properties/every_field_observation.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {
namespace {

std::string json_of(const Observation& o) {
  std::ostringstream os;
  print_json(os, o);
  return os.str();
}

TEST(ObservationJson, RoundTripsEveryCorpusObservation) {
  int files = 0, observations = 0;
  bool saw_grads_empty = false, saw_no_grads = false, saw_broadcast = false, saw_u_null = false, saw_saved = false;
  for (const auto& e : std::filesystem::directory_iterator(std::string(FSDPSIM_SOURCE_DIR) + "/corpus/regressions")) {
    if (e.path().extension() != ".seq") continue;
    ++files;
    RunResult r = run_checked(parse_seq_file(e.path().string()));
    for (const auto& o : r.observations) {
      ++observations;
      std::string line = json_of(o);
      Observation back;
      std::string err;
      ASSERT_TRUE(parse_observation_json(line, &back, &err)) << e.path() << ": " << err << "\n" << line;
      EXPECT_TRUE(back == o) << e.path() << "\n" << line << "\n" << observation_diff(o, back).at(0);
      EXPECT_EQ(json_of(back), line);
      EXPECT_EQ(back.grads.has_value(), o.grads.has_value());
      saw_grads_empty = saw_grads_empty || (o.grads && o.grads->empty());
      saw_no_grads = saw_no_grads || !o.grads;
      saw_saved = saw_saved || !o.saved.empty();
      for (const auto& c : o.collectives) saw_broadcast = saw_broadcast || c.op == CollOp::Broadcast;
      for (const auto& p : o.params) saw_u_null = saw_u_null || p.rg_u < 0;
    }
  }
  EXPECT_GE(files, 20);
  EXPECT_GT(observations, 100);
  // The corpus exercises the optional and nullable fields.
  EXPECT_TRUE(saw_grads_empty && saw_no_grads && saw_broadcast && saw_u_null && saw_saved);
}

// Every field set (the fixture filled from the field list), with what JSON finds hard: escapes in a
// text, an empty list that is not an absent one, a broadcast (which names its dtype), parts out of
// name order, a dict of several weight classes.
Observation full_observation() {
  Observation o = test::every_field_observation();
  o.message = "quote \" backslash \\ newline \n tab \t";
  o.grads = std::vector<Name>{};
  o.collectives.insert(o.collectives.begin(), {CollOp::Broadcast, "lin0.weight", 40, DType::BF16, {{"lin0.weight", 40}}});
  o.collectives[1].parts = {{"z", 8}, {"a", 204}};
  o.deltas.push_back({"a", WeightClass::Exact});
  o.deltas.push_back({"c", WeightClass::Unjudged});
  return o;
}

TEST(ObservationJson, RoundTripsEveryFieldSet) {
  Observation o = full_observation();
  Observation back;
  std::string err;
  ASSERT_TRUE(parse_observation_json(json_of(o), &back, &err)) << err;
  EXPECT_TRUE(back == o);
  EXPECT_EQ(back.collectives[1].parts[0].param, "z");  // parts keep their order
  EXPECT_EQ(back.params[0].rg_u, 0);
  EXPECT_EQ(back.params[1].rg_u, -1);
}

TEST(ObservationJson, IgnoresUnknownKeysAndReadsEscapes) {
  std::string line = json_of(full_observation());
  line.insert(1, "\"extra\":{\"nested\":[1,2.5e3,null,true]},\"op2\":\"\\u00e9\\ud83d\\ude00\",");
  Observation back;
  std::string err;
  ASSERT_TRUE(parse_observation_json(line, &back, &err)) << err;
  EXPECT_TRUE(back == full_observation());
  JsonValue v;
  ASSERT_TRUE(parse_json(line, &v, &err)) << err;
  EXPECT_EQ(v.find("op2")->text, "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_DOUBLE_EQ(v.find("extra")->find("nested")->items[1].number, 2500.0);
  EXPECT_FALSE(v.find("extra")->find("nested")->items[1].integral);
}

// The line with `from` replaced by `to` must fail with an error containing `want`.
void expect_bad(const std::string& from, const std::string& to, const std::string& want) {
  std::string line = json_of(full_observation());
  size_t at = line.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  line.replace(at, from.size(), to);
  Observation back;
  std::string err;
  EXPECT_FALSE(parse_observation_json(line, &back, &err)) << line;
  EXPECT_NE(err.find(want), std::string::npos) << "error: " << err << "\nwanted: " << want;
}

TEST(ObservationJson, MalformedLinesFailNamingTheField) {
  expect_bad("\"status\":\"key_error\"", "\"status\":\"exploded\"", "status: expected one of ok, no_grad_fn");
  expect_bad("\"step\":1,", "", "missing field 'step'");
  expect_bad("\"rank\":2", "\"rank\":\"2\"", "rank: expected number, got string");
  expect_bad("\"rank\":2", "\"rank\":2.5", "rank: expected an integer");
  expect_bad("\"U.requires_grad\":null", "\"U.requires_grad\":0", "params[1].U.requires_grad: expected bool, got number");
  expect_bad("\"dtype\":\"bf16\"", "\"dtype\":\"f16\"", "dtype: expected one of fp32, bf16, got 'f16'");
  expect_bad("\"state\":\"UNSHARDED\"", "\"state\":\"unsharded\"", "groups[0].state: expected one of SHARDED, UNSHARDED");
  expect_bad("\"parts\":{\"z\":8", "\"parts\":{\"z\":\"8\"", "collectives[1].parts.z: expected number");
  expect_bad("\"sharded_bytes\":{", "\"sharded\":{", "missing field 'sharded_bytes'");
  expect_bad("\"grads\":[]", "\"grads\":[1]", "grads[0]: expected string, got number");
  expect_bad("\"disabled\":true", "\"disabled\":1", "disabled: expected bool");
  expect_bad("\"deltas\":{\"abcdefg\":\"corrupt\"", "\"deltas\":{\"abcdefg\":\"broken\"", "deltas.abcdefg: expected one of exact");
  expect_bad("{\"step\"", "[{\"step\"", "not JSON");
  expect_bad("\"step\":1", "\"step\":01", "not JSON: offset");
  expect_bad("quote \\\"", "quote \\q", "not JSON: offset");
  Observation o;
  std::string err;
  EXPECT_FALSE(parse_observation_json("", &o, &err));
  EXPECT_FALSE(parse_observation_json(json_of(full_observation()) + " x", &o, &err));
  EXPECT_NE(err.find("end of input"), std::string::npos) << err;
  EXPECT_FALSE(parse_observation_json("[]", &o, &err));
  EXPECT_NE(err.find("observation: expected object, got array"), std::string::npos) << err;
  EXPECT_FALSE(parse_observation_json("{\"a\":\"\\ud800\"}", &o, &err));
  EXPECT_NE(err.find("low surrogate"), std::string::npos) << err;
  EXPECT_FALSE(parse_observation_json(std::string(100, '[') + std::string(100, ']'), &o, &err));
  EXPECT_NE(err.find("nesting"), std::string::npos) << err;
}

}  // namespace
}  // namespace fsdpsim
