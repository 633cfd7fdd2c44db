// Observations: name tables, field-by-field diff, JSON lines, aligned tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/observation_binary.hpp"
#include "properties/every_field_observation.hpp"

namespace fsdpsim {
namespace {

// lin0 and lin1, both targeted by adapters default and other: the names the
// observations below use (the table finds each parameter's adapter from it).
Scenario two_adapters() {
  Scenario s;
  s.layers = {{"lin0", 4, 4, 0, {}}, {"lin1", 4, 4, 0, {}}};
  AdapterDecl d;
  d.name = "default";
  d.targets = {"lin0", "lin1"};
  AdapterDecl o = d;
  o.name = "other";
  s.adapters = {d, o};
  return s;
}

TEST(Observation, StatusNamesRoundTrip) {
  const std::vector<std::string> expected = {"ok", "hang", "mismatch", "no_grad_fn", "key_error", "not_run",
                                             "shape_error", "value_error"};
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(Status::NotRun); ++i) {
    Status s = static_cast<Status>(i);
    names.push_back(status_name(s));
    Status back = Status::Ok;
    ASSERT_TRUE(status_from_name(status_name(s), &back)) << status_name(s);
    EXPECT_EQ(back, s);
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> want = expected;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
  Status untouched = Status::Hang;
  EXPECT_FALSE(status_from_name("bogus", &untouched));
  EXPECT_FALSE(status_from_name("OK", &untouched));
  EXPECT_FALSE(status_from_name("", &untouched));
  EXPECT_EQ(untouched, Status::Hang);
}

TEST(Observation, WeightClassNamesRoundTrip) {
  const char* names[] = {"exact", "missing_delta", "extra_delta", "corrupt"};
  for (int i = 0; i < 4; ++i) {
    WeightClass w = static_cast<WeightClass>(i);
    EXPECT_STREQ(weight_class_name(w), names[i]);
    WeightClass back = WeightClass::Corrupt;
    ASSERT_TRUE(weight_class_from_name(names[i], &back));
    EXPECT_EQ(back, w);
  }
  WeightClass untouched = WeightClass::ExtraDelta;
  EXPECT_FALSE(weight_class_from_name("Exact", &untouched));
  EXPECT_FALSE(weight_class_from_name("missing", &untouched));
  EXPECT_EQ(untouched, WeightClass::ExtraDelta);
}

TEST(Observation, SmallNameHelpers) {
  EXPECT_STREQ(sharded_state_name(ShardedState::Sharded), "SHARDED");
  EXPECT_STREQ(sharded_state_name(ShardedState::Unsharded), "UNSHARDED");
  EXPECT_STREQ(coll_op_name(CollOp::AllGather), "all_gather");
  EXPECT_STREQ(coll_op_name(CollOp::ReduceScatter), "reduce_scatter");
  EXPECT_EQ(collective_text({CollOp::AllGather, "root", 212, DType::F32, {}}), "all_gather(root, 212)");
  EXPECT_EQ(collective_text({CollOp::ReduceScatter, "lin0", 0, DType::F32, {}}), "reduce_scatter(lin0, 0)");
  EXPECT_EQ(names_set_text(std::vector<std::string>{}), "{}");
  EXPECT_EQ(names_set_text(std::vector<std::string>{"a"}), "{a}");
  EXPECT_EQ(names_set_text(std::vector<std::string>{"default", "other"}), "{default,other}");
}

ParamObs param(const std::string& name, const std::string& group, bool rg_s, int rg_u) {
  ParamObs p;
  p.name = name;
  p.group = group;
  p.rg_s = rg_s;
  p.rg_u = static_cast<int8_t>(rg_u);
  return p;
}

Observation sample() {
  Observation o;
  o.step = 3;
  o.rank = 1;
  o.op = "set_adapter other";
  o.status = Status::KeyError;
  o.message = "say \"hi\"\n\\";
  o.grads = std::vector<Name>{"default", "other"};
  o.index = 4;
  o.opt_missing = 2;
  o.opt_total = 8;
  o.groups = {{"lin0", ShardedState::Unsharded}, {"root", ShardedState::Sharded}};
  o.params = {param("lin0.lora_A.other", "lin0", true, -1), param("lin0.lora_B.other", "lin0", false, 1),
              param("lin1.lora_A.default", "root", true, 0)};
  o.layers = {{"lin0", "lin0", {"default", "other"}, WeightClass::MissingDelta, WeightClass::Exact},
              {"lin1", "root", {}, WeightClass::Exact, WeightClass::Corrupt}};
  o.collectives = {{CollOp::AllGather, "root", 212, DType::F32, {}}, {CollOp::ReduceScatter, "lin0", 40, DType::F32, {}}};
  return o;
}

TEST(Observation, DiffEmptyOnEqual) {
  Observation a = sample(), b = sample();
  EXPECT_TRUE(observation_diff(a, b).empty());
  EXPECT_TRUE(a == b);
  Observation e1, e2;
  EXPECT_TRUE(observation_diff(e1, e2).empty());
}

// gloo's words after kGlooSaid (the upstream pool's evidence for a hang or mismatch) are no part
// of the comparison, the hash or S5's finding: they vary from run to run.
TEST(Observation, GlooEvidenceIsNotCompared) {
  Observation a = sample(), b = sample();
  a.status = b.status = Status::Mismatch;
  a.message = "collective mismatch: rank 0 in all_gather(lin0, 52) at step 1";
  b.message = a.message + kGlooSaid + "rank 1 aborted (signal 6, SIGABRT): [enforce fail at ...]";
  EXPECT_EQ(message_words(b.message), a.message);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(observation_diff(a, b).empty());
  EXPECT_EQ(observations_hash({a}), observations_hash({b}));
  b.message = "collective mismatch: rank 0 in all_gather(lin0, 41) at step 1" + std::string(kGlooSaid) + "x";
  EXPECT_FALSE(a == b);
  EXPECT_EQ(observation_diff(a, b).size(), 1u);
  EXPECT_NE(observations_hash({a}), observations_hash({b}));
}

// Each single-field change yields exactly one diff line, naming that field.
TEST(Observation, DiffNamesTheField) {
  struct Case {
    void (*mutate)(Observation&);
    std::string line;
  };
  const Case cases[] = {
      {[](Observation& o) { o.status = Status::Hang; }, "status: key_error vs hang"},
      {[](Observation& o) { o.message = "x"; }, "message: say \"hi\"\n\\ vs x"},
      {[](Observation& o) { o.grads = std::vector<Name>{}; }, "grads: {default,other} vs {}"},
      {[](Observation& o) { o.grads.reset(); }, "grads: {default,other} vs -"},
      {[](Observation& o) { o.index = -1; }, "index: 4 vs -1"},
      {[](Observation& o) { o.opt_missing = 0; }, "optimizer_missing: 2 vs 0"},
      {[](Observation& o) { o.opt_total = 9; }, "optimizer_total: 8 vs 9"},
      {[](Observation& o) { o.groups[1].state = ShardedState::Unsharded; }, "group[1]: root:SHARDED vs root:UNSHARDED"},
      {[](Observation& o) { o.groups.pop_back(); }, "group[1]: root:SHARDED vs -"},
      {[](Observation& o) { o.params[0].rg_s = false; },
       "param[0]: lin0.lora_A.other@lin0 S.rg=1 U.rg=- cpu/fp32 vs lin0.lora_A.other@lin0 S.rg=0 U.rg=- cpu/fp32"},
      {[](Observation& o) { o.params[1].rg_u = -1; },
       "param[1]: lin0.lora_B.other@lin0 S.rg=0 U.rg=1 cpu/fp32 vs lin0.lora_B.other@lin0 S.rg=0 U.rg=- cpu/fp32"},
      {[](Observation& o) { o.params[2].group = ""; },
       "param[2]: lin1.lora_A.default@root S.rg=1 U.rg=0 cpu/fp32 vs lin1.lora_A.default@ S.rg=1 U.rg=0 cpu/fp32"},
      {[](Observation& o) { o.params[0].device = Device::Meta; },
       "param[0]: lin0.lora_A.other@lin0 S.rg=1 U.rg=- cpu/fp32 vs lin0.lora_A.other@lin0 S.rg=1 U.rg=- meta/fp32"},
      {[](Observation& o) { o.params[0].dtype = DType::BF16; },
       "param[0]: lin0.lora_A.other@lin0 S.rg=1 U.rg=- cpu/fp32 vs lin0.lora_A.other@lin0 S.rg=1 U.rg=- cpu/bf16"},
      {[](Observation& o) { o.deltas = {{"other", WeightClass::Corrupt}}; }, "deltas: - vs other:corrupt"},
      {[](Observation& o) { o.saved = {{"lin0.lora_A.other", 2, 4, DType::F32}}; }, "saved: - vs lin0.lora_A.other:2/4:fp32"},
      {[](Observation& o) { o.reload_diff = {"lin0.lora_A.other"}; }, "reload_diff: {} vs {lin0.lora_A.other}"},
      {[](Observation& o) { o.sharded_bytes = {{"other", 64}}; }, "sharded_bytes: - vs other:64"},
      {[](Observation& o) { o.peak_unsharded = {{"base", 128}}; }, "peak_unsharded: - vs base:128"},
      {[](Observation& o) { o.layers[0].merged = {"default"}; },
       "layer[0]: lin0@lin0 merged=[default,other] stored=missing_delta registered=exact vs "
       "lin0@lin0 merged=[default] stored=missing_delta registered=exact"},
      {[](Observation& o) { o.layers[1].registered = WeightClass::Exact; },
       "layer[1]: lin1@root merged=[] stored=exact registered=corrupt vs lin1@root merged=[] stored=exact registered=exact"},
      {[](Observation& o) { o.collectives.clear(); },
       "collectives: all_gather(root, 212)[] reduce_scatter(lin0, 40)[] vs -"},
      {[](Observation& o) { o.collectives[0].count = 213; },
       "collectives: all_gather(root, 212)[] reduce_scatter(lin0, 40)[] vs all_gather(root, 213)[] reduce_scatter(lin0, 40)[]"},
      {[](Observation& o) { o.collectives[1].parts = {{"lin0.lora_B.other", 40}}; },
       "collectives: all_gather(root, 212)[] reduce_scatter(lin0, 40)[] vs all_gather(root, 212)[] "
       "reduce_scatter(lin0, 40)[lin0.lora_B.other:40]"},
  };
  for (const auto& c : cases) {
    Observation a = sample(), b = sample();
    c.mutate(b);
    auto d = observation_diff(a, b);
    ASSERT_EQ(d.size(), 1u) << c.line;
    EXPECT_EQ(d[0], c.line);
    EXPECT_FALSE(a == b);
  }
}

TEST(Observation, DiffListsEveryChangedField) {
  Observation a = sample(), b = sample();
  b.status = Status::Ok;
  b.index = -1;
  b.layers[0].stored = WeightClass::Exact;
  auto d = observation_diff(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].rfind("status: ", 0), 0u);
  EXPECT_EQ(d[1].rfind("index: ", 0), 0u);
  EXPECT_EQ(d[2].rfind("layer[0]: ", 0), 0u);
}

TEST(Observation, PrintJsonOneLineWithExpectedKeys) {
  std::ostringstream os;
  print_json(os, sample());
  const std::string j = os.str();
  EXPECT_EQ(j.find('\n'), std::string::npos);
  EXPECT_EQ(j.rfind("{\"step\":3,\"rank\":1,\"op\":\"set_adapter other\",\"status\":\"key_error\"", 0), 0u) << j;
  const char* parts[] = {
      ",\"message\":\"say \\\"hi\\\"\\u000a\\\\\"",
      ",\"grads\":[\"default\",\"other\"]",
      ",\"index\":4",
      ",\"optimizer\":{\"missing\":2,\"total\":8,\"unregistered\":[]}",
      ",\"groups\":[{\"name\":\"lin0\",\"state\":\"UNSHARDED\",\"registered\":\"U\"},"
      "{\"name\":\"root\",\"state\":\"SHARDED\",\"registered\":\"S\"}]",
      ",\"params\":[{\"name\":\"lin0.lora_A.other\",\"group\":\"lin0\",\"S.requires_grad\":true,"
      "\"U.requires_grad\":null,\"device\":\"cpu\",\"dtype\":\"fp32\"},"
      "{\"name\":\"lin0.lora_B.other\",\"group\":\"lin0\",\"S.requires_grad\":false,\"U.requires_grad\":true,"
      "\"device\":\"cpu\",\"dtype\":\"fp32\"},"
      "{\"name\":\"lin1.lora_A.default\",\"group\":\"root\",\"S.requires_grad\":true,\"U.requires_grad\":false,"
      "\"device\":\"cpu\",\"dtype\":\"fp32\"}]",
      ",\"layers\":[{\"name\":\"lin0\",\"group\":\"lin0\",\"merged\":[\"default\",\"other\"],\"stored\":\"missing_delta\","
      "\"registered\":\"exact\"},{\"name\":\"lin1\",\"group\":\"root\",\"merged\":[],\"stored\":\"exact\",\"registered\":\"corrupt\"}]",
      ",\"collectives\":[{\"op\":\"all_gather\",\"group\":\"root\",\"count\":212,\"parts\":{}},"
      "{\"op\":\"reduce_scatter\",\"group\":\"lin0\",\"count\":40,\"parts\":{}}]",
      ",\"sharded_bytes\":{},\"peak_unsharded_bytes\":{}}",
  };
  size_t at = 0;
  for (const char* p : parts) {
    size_t f = j.find(p);
    ASSERT_NE(f, std::string::npos) << "missing " << p << " in " << j;
    EXPECT_GE(f, at) << "out of order: " << p;
    at = f;
  }
  EXPECT_EQ(j.back(), '}');
}

TEST(Observation, PrintJsonOmitsOptionalFields) {
  Observation o;
  o.op = "eval";
  std::ostringstream os;
  print_json(os, o);
  EXPECT_EQ(os.str(),
            "{\"step\":0,\"rank\":0,\"op\":\"eval\",\"status\":\"ok\",\"active\":[],\"disabled\":false,\"optimizer\":{\"missing\":0,\"total\":0,\"unregistered\":[]},"
            "\"groups\":[],\"params\":[],\"layers\":[],\"collectives\":[],\"sharded_bytes\":{},\"peak_unsharded_bytes\":{}}");
  o.grads = std::vector<Name>{};
  std::ostringstream os2;
  print_json(os2, o);
  EXPECT_NE(os2.str().find(",\"grads\":[],"), std::string::npos) << os2.str();
  EXPECT_EQ(os2.str().find("\"index\""), std::string::npos);
  EXPECT_EQ(os2.str().find("\"message\""), std::string::npos);
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

TEST(Observation, PrintTableAlignsColumns) {
  Observation a;
  a.step = 1;
  a.rank = 0;
  a.op = "eval";
  a.groups = {{"root", ShardedState::Sharded}};
  a.params = {param("lin0.lora_A.default", "root", true, -1)};
  Observation b = sample();
  b.step = 12;
  b.message = "KeyError: 4";
  Observation c;
  c.step = 3;
  c.rank = 1;
  c.op = "@1 train_step";
  c.status = Status::NoGradFn;
  c.message = kNoGradFnMessage;
  c.grads = std::vector<Name>{};
  c.collectives = {{CollOp::AllGather, "root", 10, DType::F32, {}}, {CollOp::AllGather, "lin0", 5, DType::F32, {}}};

  // Expected cells, per row, in header order.
  const std::vector<std::vector<std::string>> rows = {
      {"step", "rank", "op", "status", "grads", "S.requires_grad", "groups", "merged", "collectives"},
      {"1", "0", "eval", "ok", "", "{default}", "root:S", "-", "-"},
      {"12", "1", "set_adapter other", "key_error 4 (2/8)", "{default,other}", "{other,default} U!=S:{other}",
       "lin0:U root:S", "lin0:[default,other]/S=missing_delta lin1:[]/reg=corrupt", "ag 1x212 rs 1x40"},
      {"3", "1", "@1 train_step", "no_grad_fn", "{}", "{}", "", "-", "ag 2x15"},
  };
  std::ostringstream os;
  print_table(os, two_adapters(), {a, b, c});
  auto lines = lines_of(os.str());
  ASSERT_EQ(lines.size(), 6u) << os.str();  // header, 3 rows, 2 message lines
  std::vector<size_t> offset;
  size_t from = 0;
  for (const auto& h : rows[0]) {
    size_t f = lines[0].find(h, from);
    ASSERT_NE(f, std::string::npos) << "header lacks " << h << ": " << lines[0];
    offset.push_back(f);
    from = f + h.size();
  }
  EXPECT_EQ(offset[0], 0u);
  for (size_t c2 = 0; c2 + 1 < offset.size(); ++c2) {
    size_t width = 0;
    for (const auto& r : rows) width = std::max(width, r[c2].size());
    EXPECT_EQ(offset[c2 + 1], offset[c2] + width + 2) << "column " << rows[0][c2];
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string& line = lines[r];
    EXPECT_EQ(line.find_last_not_of(' ') + 1, line.size()) << "trailing blanks: '" << line << "'";
    for (size_t col = 0; col < rows[r].size(); ++col) {
      const std::string& cell = rows[r][col];
      if (cell.empty()) continue;
      ASSERT_LE(offset[col] + cell.size(), line.size()) << line;
      EXPECT_EQ(line.substr(offset[col], cell.size()), cell) << "row " << r << " column " << rows[0][col] << ": " << line;
      if (col > 0) {
        EXPECT_EQ(line.substr(offset[col] - 2, 2), "  ") << line;
      }
    }
  }
  EXPECT_EQ(lines[4], "  step 12 rank 1: KeyError: 4");
  auto tail = os.str().substr(os.str().find("  step 3 rank 1: "));
  EXPECT_EQ(tail, std::string("  step 3 rank 1: ") + kNoGradFnMessage + "\n");
}

TEST(Observation, PrintTableHeaderOnlyWhenEmpty) {
  std::ostringstream os;
  print_table(os, two_adapters(), {});
  EXPECT_EQ(os.str(), "step  rank  op  status  grads  S.requires_grad  groups  merged  collectives\n");
}

// The fixture is filled from the field list: no field keeps its default, so
// every codec test that round-trips it exercises every field.
TEST(Observation, EveryFieldObservationSetsEveryField) {
  const Observation o = test::every_field_observation(), d;
  int fields = 0;
  for_each_field_pair(o, d, [&](const FieldInfo& f, const auto& set, const auto& unset) {
    ++fields;
    EXPECT_FALSE(set == unset) << f.key << " keeps its default";
  });
  EXPECT_GT(fields, 20);  // the walk ran
}

// The trace hash `run` prints is pinned: the same sequence must print the same
// hash from one version to the next, so a change to how it reads the fields (a
// string's last partial word, say) must not change a value.
TEST(Observation, TraceHashIsPinned) {
  const Observation o = test::every_field_observation();
  Observation next = o;
  next.step = 4;
  next.message = kNoGradFnMessage;
  EXPECT_EQ(observations_hash({}), 0x14650fb0739d0383ull);
  EXPECT_EQ(observations_hash({o}), 0x7bd704101649eec6ull);
  EXPECT_EQ(observations_hash({o, next}), 0x4301f0032d2422ebull);
}

}  // namespace
}  // namespace fsdpsim
