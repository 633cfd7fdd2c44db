#include "sim/core/crosscheck_results.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <iterator>

#include "model/vocab/json_reader.hpp"
#include "model/vocab/observation.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {

bool CrosscheckResults::operator==(const CrosscheckResults& o) const {
  return seed == o.seed && count == o.count && world == o.world && backends == o.backends && profile == o.profile &&
         draw == o.draw && first == o.first && end == o.end && divergent == o.divergent && broken == o.broken && findings == o.findings;
}

std::pair<int64_t, int64_t> shard_range(int64_t count, int index, int shards) {
  return {count * index / shards, count * (index + 1) / shards};
}

void write_results_json(std::ostream& os, const CrosscheckResults& r) {
  auto seeds = [&](const std::vector<uint64_t>& v) {
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    os << "]";
  };
  os << "{\"crosscheck\":{\"seed\":" << r.seed << ",\"count\":" << r.count << ",\"world\":" << r.world << ",\"backends\":";
  print_json_string(os, r.backends);
  os << ",\"profile\":";
  print_json_string(os, r.profile);
  if (!r.draw.empty()) {  // absent without --draw, so such results print as they always did
    os << ",\"draw\":";
    print_json_string(os, r.draw);
  }
  os << "},\"first\":" << r.first << ",\"end\":" << r.end << ",\"divergent\":";
  seeds(r.divergent);
  os << ",\"broken\":";
  seeds(r.broken);
  os << ",\"findings\":{";
  bool comma = false;
  for (const auto& [spec, n] : r.findings) {
    os << (comma ? "," : "");
    print_json_string(os, spec);
    os << ":" << n;
    comma = true;
  }
  os << "}}\n";
}

void write_results_file(const std::string& path, const CrosscheckResults& r) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) write_results_json(out, r);
  if (!out.flush())
    throw SourceError("<command line>", {}, fmt::format("--results: cannot write '{}': {}", path, std::strerror(errno)));
}

namespace {

// "offset N: expected ..." from parse_json, as line:column of text.
SourcePos position_of(const std::string& text, const std::string& error) {
  size_t off = error.rfind("offset ", 0) == 0 ? std::strtoull(error.c_str() + 7, nullptr, 10) : 0;
  SourcePos pos{1, 1};
  for (size_t i = 0; i < off && i < text.size(); ++i) {
    if (text[i] == '\n') ++pos.line, pos.column = 1;
    else ++pos.column;
  }
  return pos;
}

class Fields {
 public:
  Fields(const std::string& file) : file_(file) {}
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    throw SourceError(file_, {}, fmt::format("field '{}': expected {}", field, what));
  }
  const JsonValue& get(const JsonValue& obj, const std::string& key, const std::string& path) const {
    const JsonValue* v = obj.find(key);
    if (!v) bad(path, "to be present");
    return *v;
  }
  int64_t integer(const JsonValue& obj, const std::string& key, const std::string& path, int64_t lo) const {
    const JsonValue& v = get(obj, key, path);
    if (v.kind != JsonValue::Kind::Number || !v.integral || v.integer < lo) bad(path, fmt::format("an integer >= {}", lo));
    return v.integer;
  }
  std::string text(const JsonValue& obj, const std::string& key, const std::string& path) const {
    const JsonValue& v = get(obj, key, path);
    if (v.kind != JsonValue::Kind::String) bad(path, fmt::format("a string, got {}", json_kind_name(v.kind)));
    return v.text;
  }
  std::vector<uint64_t> seeds(const JsonValue& obj, const std::string& key) const {
    const JsonValue& v = get(obj, key, key);
    if (v.kind != JsonValue::Kind::Array) bad(key, "an array of seeds");
    std::vector<uint64_t> out;
    for (const auto& x : v.items) {
      if (x.kind != JsonValue::Kind::Number || !x.integral || x.integer < 0) bad(key, "an array of seeds (integers >= 0)");
      out.push_back(static_cast<uint64_t>(x.integer));
    }
    if (!std::is_sorted(out.begin(), out.end())) bad(key, "seeds in ascending order");
    return out;
  }

 private:
  std::string file_;
};

}  // namespace

CrosscheckResults read_results_json(const std::string& text, const std::string& file) {
  JsonValue v;
  std::string error;
  if (!parse_json(text, &v, &error)) {
    std::string what = error.substr(error.find(": ") == std::string::npos ? 0 : error.find(": ") + 2);
    throw SourceError(file, position_of(text, error), what + " (a crosscheck --results file)");
  }
  Fields f(file);
  if (v.kind != JsonValue::Kind::Object) f.bad("(top level)", "an object");
  const JsonValue& run = f.get(v, "crosscheck", "crosscheck");
  if (run.kind != JsonValue::Kind::Object) f.bad("crosscheck", "an object");
  CrosscheckResults r;
  r.seed = static_cast<uint64_t>(f.integer(run, "seed", "crosscheck.seed", 0));
  r.count = f.integer(run, "count", "crosscheck.count", 1);
  r.world = static_cast<int>(f.integer(run, "world", "crosscheck.world", 1));
  r.backends = f.text(run, "backends", "crosscheck.backends");
  r.profile = f.text(run, "profile", "crosscheck.profile");
  if (run.find("draw")) r.draw = f.text(run, "draw", "crosscheck.draw");
  r.first = f.integer(v, "first", "first", 0);
  r.end = f.integer(v, "end", "end", r.first);
  if (r.end > r.count) f.bad("end", fmt::format("at most crosscheck.count ({})", r.count));
  r.divergent = f.seeds(v, "divergent");
  r.broken = f.seeds(v, "broken");
  const JsonValue& fs = f.get(v, "findings", "findings");
  if (fs.kind != JsonValue::Kind::Object) f.bad("findings", "an object of counts by spec");
  for (const auto& [spec, n] : fs.members) {
    if (n.kind != JsonValue::Kind::Number || !n.integral || n.integer < 0) f.bad("findings." + spec, "a count");
    r.findings[spec] = n.integer;
  }
  for (const auto* list : {&r.divergent, &r.broken})
    for (uint64_t s : *list)
      if (s < r.seed + static_cast<uint64_t>(r.first) || s >= r.seed + static_cast<uint64_t>(r.end))
        f.bad(list == &r.divergent ? "divergent" : "broken",
              fmt::format("seeds of the range covered ({}..{}), got {}", r.seed + r.first, r.seed + r.end - 1, s));
  return r;
}

CrosscheckResults merge_results(const std::vector<CrosscheckResults>& parts, const std::vector<std::string>& files) {
  if (parts.empty()) throw SourceError("<command line>", {}, "merge-results expects at least one results file");
  std::vector<size_t> order(parts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return parts[a].first < parts[b].first; });
  const CrosscheckResults& head = parts[order[0]];
  CrosscheckResults out = head;
  out.divergent.clear(), out.broken.clear(), out.findings.clear();
  out.end = head.first;
  auto run_text = [](const CrosscheckResults& r) {
    std::string text = fmt::format("seed {}, count {}, world {}, backends {}, profile '{}'", r.seed, r.count, r.world, r.backends,
                                   r.profile);
    if (!r.draw.empty()) fmt::format_to(std::back_inserter(text), ", draw {}", r.draw);
    return text;
  };
  for (size_t i : order) {
    const CrosscheckResults& p = parts[i];
    if (p.seed != head.seed || p.count != head.count || p.world != head.world || p.backends != head.backends || p.profile != head.profile ||
        p.draw != head.draw)
      throw SourceError(files[i], {},
                        fmt::format("results of another crosscheck: {}, expected {} (as {})", run_text(p), run_text(head),
                                    files[order[0]]));
    if (p.first < out.end)
      throw SourceError(files[i], {},
                        fmt::format("sequences {}..{} overlap ones already merged (up to {})", p.first, p.end - 1, out.end - 1));
    if (p.first > out.end)
      throw SourceError(files[i], {}, fmt::format("sequences {}..{} are in no file: a shard is missing", out.end, p.first - 1));
    out.end = p.end;
    out.divergent.insert(out.divergent.end(), p.divergent.begin(), p.divergent.end());
    out.broken.insert(out.broken.end(), p.broken.begin(), p.broken.end());
    for (const auto& [spec, n] : p.findings) out.findings[spec] += n;
  }
  return out;
}

void PrepareTally::add(const std::string& prepared_by) {
  ++upstream_runs;
  if (prepared_by == "accelerate") ++accelerate;
  else if (prepared_by.empty()) ++unprepared;
  else if (prepared_by == "mixed") ++mixed;
  else ++fallbacks[prepared_by];
}

std::string PrepareTally::accelerate_text() const {
  if (upstream_runs == 0) return "no upstream run";
  return fmt::format("{} of {} ({:.1f} %)", accelerate, upstream_runs, 100.0 * static_cast<double>(accelerate) / static_cast<double>(upstream_runs));
}

std::vector<std::vector<std::string>> PrepareTally::rows() const {
  std::vector<std::vector<std::string>> out = {{"prepared by accelerate", accelerate_text()}};
  std::vector<std::pair<std::string, int64_t>> by_count(fallbacks.begin(), fallbacks.end());
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [reason, n] : by_count) out.push_back({"  direct: " + reason, std::to_string(n)});
  if (mixed) out.push_back({"  ranks took different paths", std::to_string(mixed)});
  if (unprepared) out.push_back({"  path not reported", std::to_string(unprepared)});
  return out;
}

}  // namespace fsdpsim
