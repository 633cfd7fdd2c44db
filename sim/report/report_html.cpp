#include "sim/report/report_html.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "model/vocab/text.hpp"

namespace fsdpsim {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string page_relative(const std::string& path, const std::string& page) {
  if (path.empty()) return path;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::absolute(page, ec).lexically_normal().parent_path();
  const fs::path rel = fs::absolute(path, ec).lexically_normal().lexically_relative(dir);
  return rel.empty() ? path : rel.generic_string();
}

namespace {

// One stylesheet for every page: the colours are the page's legend (and the
// browser test reads them back), so they live in one place.
const char* kStyle = R"CSS(
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#202124;background:#fff}
h1{font-size:19px;margin:0 0 4px} h2{font-size:15px;margin:14px 0 4px}
.scenario,.summary,.note{margin:2px 0;color:#3c4043}
.mono,.op,.pn,.colls,.layers,.msg{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:11.5px}
table.tl{border-collapse:separate;border-spacing:3px;margin-top:8px}
table.tl>thead th{background:#f1f3f4;padding:4px 6px;font-weight:600;text-align:left}
td.step{font-weight:700;text-align:right;vertical-align:top;padding:4px}
td.op{vertical-align:top;padding:4px;white-space:nowrap;font-weight:600}
td.cell{vertical-align:top;padding:4px 6px;border-left:6px solid #c8ccd2;background:#fafafa;min-width:190px}
td.cell.finding{border-left-color:#d93025;background:#fdecea}
td.cell.differs{outline:3px dashed #f29900;outline-offset:-3px}
td.cell.idle{background:#fff;color:#9aa0a6;border-left-color:#eceff1}
td.notes{vertical-align:top;padding:4px 6px;max-width:460px}
.status{font-weight:700;margin-bottom:2px} .s-ok{color:#188038} .s-bad{color:#d93025}
.msg{color:#a50e0e;white-space:pre-wrap;word-break:break-word;max-width:320px}
table.params{border-collapse:collapse;margin:3px 0}
table.params th{font-weight:500;color:#5f6368;font-size:10.5px;padding:0 3px;text-align:center}
table.params td{padding:0 3px;text-align:center}
table.params td.pn{text-align:left}
td.rg-on{background:#b7e1c1;color:#0d652d} td.rg-off{background:#eceff1;color:#80868b} td.rg-none{color:#bdc1c6}
td.reg-U{color:#1a73e8;font-weight:700} td.reg-S{color:#5f6368}
tr.split td.pn{background:#fef7e0;color:#b06000;font-weight:700}
.d{box-shadow:inset 0 0 0 2px #f29900}
.grads,.extra{font-size:11.5px;color:#3c4043}
.bad{color:#d93025;font-weight:600}
ul.diffs{margin:3px 0 0 14px;padding:0;color:#b06000;font-size:11px}
.fnote{border-left:4px solid #d93025;background:#fdecea;padding:3px 6px;margin-bottom:4px}
.fnote .why{color:#5f6368;font-style:italic}
.dnote{border-left:4px solid #f29900;background:#fef7e0;padding:3px 6px;margin-bottom:4px}
.legend{display:flex;gap:14px;flex-wrap:wrap;align-items:center;margin:6px 0;font-size:12px}
.legend span{display:inline-flex;gap:4px;align-items:center}
a{color:#1a73e8;text-decoration:none}
dl.words{display:grid;grid-template-columns:max-content 1fr;gap:1px 10px;margin:4px 0 8px;font-size:12px;color:#3c4043;max-width:1100px}
dl.words dt{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-weight:700} dl.words dd{margin:0}
div.scroll{max-width:100%;overflow-x:auto}
.box{background:#e8f0fe;border:1px solid #1a73e8;border-left:8px solid #1a73e8;padding:8px 12px;margin:0 0 12px;max-width:1100px}
.box.clean{background:#e6f4ea;border-color:#188038}
.box h2{margin:0 0 4px} .box p{margin:3px 0} .box code{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;padding:1px 4px}
)CSS";

}  // namespace

std::string html_page(const std::string& title, const std::string& body) {
  return fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n"
                     "<style>{}</style></head>\n<body>\n{}</body></html>\n",
                     html_escape(title), kStyle, body);
}

std::string spec_explanation(const std::string& spec) {
  static const std::map<std::string, std::string> k = {
      {"S1", "after set_adapter(X) every training step sends gradients to exactly X's shards"},
      {"S2", "the weight a module holds equals W0 plus the sum of its merged deltas"},
      {"S3", "nothing changed on an unsharded copy is lost at reshard: a group going from unsharded to sharded "
             "keeps U's requires_grad and values"},
      {"S4", "optimizer checkpoints save and load at any point"},
      {"S5", "ranks issue the same collectives (no hang, no mismatch) and agree on adapter state"},
      {"S6", "save_adapters writes every selected adapter, full size, and load_adapters restores the saved values"},
      {"S7", "get_delta_weight works on sharded parameters and gives the delta of the full A and B"},
      {"S8", "the same sequence gives the same observations and trace hash"},
  };
  auto it = k.find(spec);
  return it == k.end() ? "" : it->second;
}

namespace {

using CellKey = std::pair<int, int>;  // (step, rank)

// Which parts of a cell differ from the first backend's, from
// observation_diff's field names ("param[3]", "grads", ...).
struct CellMarks {
  std::vector<std::string> lines;  // "grads: {other} vs {}" (first backend's value first)
  std::set<std::string> fields;    // "param[3]", "grads", "collectives", ...
  bool any() const { return !lines.empty(); }
};

std::string field_of(const std::string& diff) { return diff.substr(0, diff.find(':')); }

bool marked(const CellMarks* m, const std::string& field) { return m && m->fields.count(field); }

// The adapter owning a parameter, from the declarations (never by splitting the name).
std::string adapter_of(const Scenario& sc, const std::string& param) { return sc.owner_of_param(param); }

std::string short_param(std::string name) {
  for (size_t p; (p = name.find(".lora_")) != std::string::npos;) name.replace(p, 6, ".");
  return name;
}

// The groups as an SVG strip: a filled box for a group holding U, an outlined
// one for a sharded group.
std::string groups_svg(const Observation& o, const CellMarks* m) {
  // None before prepare, and none reported by a rank stopped in a collective.
  if (o.groups.empty()) return "<div class=\"extra\">no FSDP groups observed</div>";
  const int h = 18, pad = 4;
  std::vector<int> widths;
  int total = 0;
  for (const auto& g : o.groups) {
    widths.push_back(static_cast<int>(g.name.size() + 2) * 7 + 8);
    total += widths.back() + pad;
  }
  std::ostringstream s;
  s << "<svg class=\"groups\" width=\"" << total << "\" height=\"" << h + 2 << "\" role=\"img\" aria-label=\"groups\">";
  int x = 1;
  for (size_t i = 0; i < o.groups.size(); ++i) {
    const auto& g = o.groups[i];
    bool u = g.state == ShardedState::Unsharded;
    bool d = marked(m, fmt::format("group[{}]", i));
    s << "<g class=\"group " << (u ? "g-U" : "g-S") << "\" data-group=\"" << html_escape(g.name) << "\"><title>group "
      << html_escape(g.name) << ": " << sharded_state_name(g.state) << (u ? " (U registered)" : " (S registered)") << "</title>"
      << "<rect x=\"" << x << "\" y=\"1\" rx=\"4\" width=\"" << widths[i] << "\" height=\"" << h << "\" fill=\""
      << (u ? "#1a73e8" : "#ffffff") << "\" stroke=\"" << (d ? "#f29900" : u ? "#1a73e8" : "#9aa0a6") << "\" stroke-width=\""
      << (d ? 3 : 1) << "\"/><text x=\"" << x + widths[i] / 2 << "\" y=\"" << h - 4 << "\" text-anchor=\"middle\" font-size=\"11\" fill=\""
      << (u ? "#ffffff" : "#3c4043") << "\">" << html_escape(g.name) << ":" << (u ? "U" : "S") << "</text></g>";
    x += widths[i] + pad;
  }
  s << "</svg>";
  return s.str();
}

std::string params_table(const Scenario& sc, const Observation& o, const CellMarks* m) {
  if (o.params.empty()) return "";
  auto state_of = [&](const std::string& group) -> const char* {
    for (const auto& g : o.groups)
      if (g.name == group) return g.state == ShardedState::Unsharded ? "U" : "S";
    return "-";  // no group manages it: a plain tensor
  };
  std::set<std::string> grads;
  if (o.grads) grads.insert(o.grads->begin(), o.grads->end());
  std::ostringstream s;
  s << "<table class=\"params\"><tr><th></th><th title=\"object registered on the module: S shard, U unsharded copy\">reg</th>"
       "<th title=\"requires_grad on the shard S\">S.rg</th><th title=\"requires_grad on the unsharded copy U\">U.rg</th>"
    << (o.grads ? "<th title=\"the shard received a gradient\">grad</th>" : "") << "</tr>";
  for (size_t i = 0; i < o.params.size(); ++i) {
    const ParamObs& p = o.params[i];
    const char* reg = state_of(p.group);
    // U!=S on a registered U: the flip that a reshard drops (seed 000).
    bool split = p.rg_u >= 0 && (p.rg_u != 0) != p.rg_s && std::string(reg) == "U";
    std::vector<std::string> cls;
    if (split) cls.push_back("split");
    if (marked(m, fmt::format("param[{}]", i))) cls.push_back("d");
    const std::string c = join(cls, " ");
    s << "<tr" << (c.empty() ? "" : fmt::format(" class=\"{}\"", c)) << " data-param=\"" << html_escape(p.name) << "\">"
      << "<td class=\"pn\" title=\""
      << html_escape(fmt::format("{} @{} {}/{}", p.name.str(), p.group.empty() ? "(no group)" : p.group.c_str(),
                                 device_name(p.device), dtype_name(p.dtype)))
      << "\">" << html_escape(short_param(p.name)) << "</td>"
      << "<td class=\"reg reg-" << reg << "\">" << reg << "</td>"
      << "<td class=\"rg " << (p.rg_s ? "rg-on\">&#9679;" : "rg-off\">&#9675;") << "</td>"
      << "<td class=\"rg " << (p.rg_u < 0 ? "rg-none\">&ndash;" : p.rg_u ? "rg-on\">&#9679;" : "rg-off\">&#9675;") << "</td>";
    if (o.grads) s << "<td class=\"gr\">" << (grads.count(adapter_of(sc, p.name)) ? "&#8711;" : "") << "</td>";
    s << "</tr>";
  }
  s << "</table>";
  return s.str();
}

std::string layers_html(const Observation& o, const CellMarks* m) {
  std::ostringstream s;
  for (size_t i = 0; i < o.layers.size(); ++i) {
    const LayerObs& l = o.layers[i];
    const std::string merged = join(l.merged);
    auto wc = [](WeightClass w) {
      std::string n = weight_class_name(w);
      return w == WeightClass::Exact ? n : fmt::format("<span class=\"bad\">{}</span>", n);
    };
    s << "<div class=\"layers" << (marked(m, fmt::format("layer[{}]", i)) ? " d" : "") << "\" data-layer=\""
      << html_escape(l.name) << "\">" << html_escape(l.name) << " merged [" << html_escape(merged) << "] S:" << wc(l.stored)
      << " held:" << wc(l.registered) << "</div>";
  }
  return s.str();
}

// `attrs`: the cell's data-backend/-backends/-ranks attributes, escaped.
std::string cell_html(const Scenario& sc, const Observation& o, const std::vector<const Finding*>& fs, const CellMarks* m,
                      const std::string& attrs) {
  std::string specs;
  for (const Finding* f : fs)
    if (specs.find(f->spec) == std::string::npos)
      fmt::format_to(std::back_inserter(specs), "{}{}", specs.empty() ? "" : " ", f->spec);
  bool ok = o.status == Status::Ok;
  std::ostringstream s;
  s << "<td class=\"cell" << (fs.empty() ? "" : " finding") << (m && m->any() ? " differs" : "") << "\" data-step=\"" << o.step
    << "\" data-rank=\"" << o.rank << "\"" << attrs << " data-findings=\"" << specs << "\">";
  s << "<div class=\"status " << (ok ? "s-ok" : "s-bad") << ((marked(m, "status") || marked(m, "message")) ? " d" : "") << "\">"
    << html_escape(status_cell(o)) << (specs.empty() ? "" : " &middot; " + specs) << "</div>";
  if (!o.message.empty() && !ok) s << "<div class=\"msg\">" << html_escape(o.message) << "</div>";
  s << groups_svg(o, m) << params_table(sc, o, m);
  if (o.grads) s << "<div class=\"grads" << (marked(m, "grads") ? " d" : "") << "\">grads " << html_escape(names_set_text(*o.grads)) << "</div>";
  s << layers_html(o, m);
  std::string colls = colls_cell(o);
  s << "<div class=\"colls" << (marked(m, "collectives") ? " d" : "") << "\"";
  if (!o.collectives.empty()) {
    std::string all;
    for (const auto& c : o.collectives)
      fmt::format_to(std::back_inserter(all), "{}{}", all.empty() ? "" : "\n", collective_text(c));
    s << " title=\"" << html_escape(all) << "\"";
  }
  s << ">collectives " << html_escape(colls) << "</div>";
  // The rest, shown only when it says something.
  std::vector<std::string> extra;
  static const std::set<std::string> drawn = {"status", "message", "grads", "collectives"};
  bool extra_marked = false;
  if (m)
    for (const auto& f : m->fields)
      if (!drawn.count(f) && f.find('[') == std::string::npos) extra_marked = true;
  extra.push_back(fmt::format("active {}{}", names_set_text(o.active), o.disabled ? " (disabled)" : ""));
  if (o.opt_missing) extra.push_back(fmt::format("optimizer: {}/{} not registered", o.opt_missing, o.opt_total));
  if (placement_cell(sc, o) != "-") extra.push_back(fmt::format("placement {}", placement_cell(sc, o)));
  if (detail_cell(o) != "-") extra.push_back(detail_cell(o));
  s << "<div class=\"extra" << (extra_marked ? " d" : "") << "\">";
  for (size_t i = 0; i < extra.size(); ++i) s << (i ? "<br>" : "") << html_escape(extra[i]);
  s << "</div>";
  if (m && m->any()) {
    s << "<ul class=\"diffs\">";
    for (const auto& d : m->lines) s << "<li>" << html_escape(d) << "</li>";
    s << "</ul>";
  }
  s << "</td>";
  return s.str();
}

// "rank 0", "ranks 0-1", "ranks 0, 2".
std::string rank_label(const std::vector<int>& rs) {
  if (rs.size() == 1) return fmt::format("rank {}", rs[0]);
  if (rs.back() - rs.front() + 1 == static_cast<int>(rs.size())) return fmt::format("ranks {}-{}", rs.front(), rs.back());
  std::vector<std::string> v;
  for (int r : rs) v.push_back(std::to_string(r));
  return "ranks " + join(v, ", ");
}

std::string scenario_line(const SeqFile& f) {
  const Scenario& sc = f.scenario;
  std::ostringstream s;
  s << "world " << sc.world << " &middot; seed " << sc.seed << " &middot; profile " << html_escape(sc.profile);
  for (const auto& o : sc.overrides) s << " &middot; set " << html_escape(fmt::format("{}={}", o.name, o.value));
  return s.str();
}

}  // namespace

std::string timeline_legend() {
  auto box = [](const char* fill, const char* stroke) {
    return fmt::format("<svg width=\"18\" height=\"14\"><rect x=\"1\" y=\"1\" width=\"16\" height=\"12\" rx=\"3\" fill=\"{}\" "
                       "stroke=\"{}\"/></svg>",
                       fill, stroke);
  };
  return fmt::format(
      "<div class=\"legend\"><span>{}group unsharded (U registered)</span><span>{}group sharded (S registered)</span>"
      "<span>{}&#9679; requires_grad</span><span>{}&#9675; no requires_grad (&ndash;: no U)</span>"
      "<span>{}U.rg differs from S.rg on a registered U</span><span>&#8711; shard got a gradient</span>"
      "<span>{}finding</span><span>{}backends differ</span></div>\n"
      "<dl class=\"words\"><dt>reg</dt><dd>the object the module holds for the parameter now: <b>S</b> its shard "
      "(the group is sharded), <b>U</b> the unsharded full copy gathered from every rank</dd>"
      "<dt>S.rg</dt><dd>requires_grad on the shard S, what the optimizer steps</dd>"
      "<dt>U.rg</dt><dd>requires_grad on the unsharded copy U, what autograd sees while the group is unsharded "
      "(&ndash;: no copy yet)</dd>"
      "<dt>&#8711;</dt><dd>the shard received a gradient at this step</dd>"
      "<dt>merged [..] S: held:</dt><dd>the layer's merged adapters; what the stored shard and the weight the module "
      "holds contain (exact, or what is missing or extra)</dd>"
      "<dt>collectives</dt><dd>the collectives this rank issued during the op (hover for each)</dd>"
      "<dt>ranks 0-1, model, real</dt><dd>columns that say the same are drawn once: ranks with identical cells, "
      "and backends that agree with the first on every compared field</dd></dl>",
      box("#1a73e8", "#1a73e8"), box("#ffffff", "#9aa0a6"), box("#b7e1c1", "#b7e1c1"), box("#eceff1", "#eceff1"),
      box("#fef7e0", "#f9ab00"), box("#fdecea", "#d93025"), box("#ffffff", "#f29900"));
}

std::string timeline_section(const Timeline& t, TimelineCounts* counts) {
  const size_t nb = t.backends.size();
  int world = t.file.scenario.world;
  int steps = static_cast<int>(t.file.ops.size());
  // Observations by backend and (step, rank); op text by step.
  std::vector<std::map<CellKey, const Observation*>> obs(nb);
  std::map<int, std::string> op_texts;
  for (size_t b = 0; b < nb; ++b)
    for (const auto& o : t.backends[b].observations) {
      obs[b][{o.step, o.rank}] = &o;
      op_texts.emplace(o.step, o.op);
      steps = std::max(steps, o.step);
      world = std::max(world, o.rank + 1);
    }
  for (int i = 0; i < static_cast<int>(t.file.ops.size()); ++i) op_texts.emplace(i + 1, op_text(t.file.ops[i]));

  // Differences from the first backend, marked on both cells.
  std::vector<std::map<CellKey, CellMarks>> marks(nb);
  int differing = 0;
  for (size_t b = 1; b < nb; ++b) {
    std::set<CellKey> keys;
    for (const auto& [k, o] : obs[0]) keys.insert(k);
    for (const auto& [k, o] : obs[b]) keys.insert(k);
    for (const CellKey& k : keys) {
      auto a = obs[0].find(k), o = obs[b].find(k);
      CellMarks m;
      if (a == obs[0].end() || o == obs[b].end()) {
        m.lines.push_back(fmt::format("observed by the {} only", t.backends[a == obs[0].end() ? b : 0].name));
        m.fields.insert("status");
      } else {
        for (const auto& d : observation_diff(*a->second, *o->second))
          if (!t.ignored || !t.ignored(t.backends[b].name, d)) {
            m.lines.push_back(d);
            m.fields.insert(field_of(d));
          }
      }
      if (!m.any()) continue;
      ++differing;
      CellMarks& ref = marks[0][k];
      ref.fields.insert(m.fields.begin(), m.fields.end());
      ref.lines.push_back(fmt::format("differs on the {} (listed there)", t.backends[b].name));
      for (auto& l : m.lines) l = fmt::format("{} vs {}: {}", t.backends[0].name, t.backends[b].name, l);
      marks[b][k] = std::move(m);
    }
  }

  // The findings a cell shows: its rank's, and those of no one rank.
  auto findings_at = [&](size_t b, int step, int r) {
    std::vector<const Finding*> fs;
    for (const auto& f : t.backends[b].findings)
      if (f.step == step && (f.rank == r || f.rank < 0)) fs.push_back(&f);
    return fs;
  };
  auto texts = [](const std::vector<const Finding*>& fs) {
    std::vector<std::string> v;
    for (const Finding* f : fs) v.push_back(f->spec + " " + f->text.substr(f->text.find(':') + 1));  // "S3 step 4 rank 0:" aside
    return v;
  };
  // Columns drawn once for several (timeline_section's header comment): ranks first.
  auto same_ranks = [&](int r1, int r2) {
    for (size_t b = 0; b < nb; ++b)
      for (int step = 1; step <= steps; ++step) {
        auto x = obs[b].find({step, r1}), y = obs[b].find({step, r2});
        if ((x == obs[b].end()) != (y == obs[b].end()) || marks[b].count({step, r1}) != marks[b].count({step, r2})) return false;
        if (texts(findings_at(b, step, r1)) != texts(findings_at(b, step, r2))) return false;
        if (x == obs[b].end()) continue;
        for (const auto& d : observation_diff(*x->second, *y->second))
          if (field_of(d) != "rank") return false;
      }
    return true;
  };
  std::vector<std::vector<int>> rank_cols;
  for (int r = 0; r < world; ++r) {
    auto g = std::find_if(rank_cols.begin(), rank_cols.end(), [&](const std::vector<int>& c) { return same_ranks(c.front(), r); });
    if (g == rank_cols.end()) rank_cols.push_back({r});
    else g->push_back(r);
  }
  // A backend with no marked cell agrees with the first on every compared field; with the same findings it shares its column.
  std::vector<std::vector<size_t>> backend_cols = {{0}};
  for (size_t b = 1; b < nb; ++b) {
    bool same = marks[b].empty();
    for (int step = 1; same && step <= steps; ++step)
      for (int r = 0; same && r < world; ++r) same = texts(findings_at(b, step, r)) == texts(findings_at(0, step, r));
    if (same) backend_cols[0].push_back(b);
    else backend_cols.push_back({b});
  }
  auto names_of = [&](const std::vector<size_t>& bs, const char* sep) {
    std::vector<std::string> v;
    for (size_t b : bs) v.push_back(t.backends[b].name);
    return html_escape(join(v, sep));
  };

  // Findings by step; distinct texts with the backends that report them.
  std::map<int, std::vector<std::pair<const Finding*, std::vector<std::string>>>> notes;
  int nfindings = 0;
  for (size_t b = 0; b < nb; ++b)
    for (const auto& f : t.backends[b].findings) {
      auto& v = notes[f.step];
      auto it = std::find_if(v.begin(), v.end(), [&](const auto& e) { return e.first->text == f.text; });
      if (it == v.end()) {
        v.push_back({&f, {}});
        it = v.end() - 1;
        ++nfindings;
      }
      it->second.push_back(t.backends[b].name);
    }
  auto finding_note = [&](const Finding& f, const std::vector<std::string>& who) {
    const std::string w = nb > 1 ? fmt::format(" <span class=\"mono\">[{}]</span>", html_escape(join(who, ", "))) : "";
    return fmt::format("<div class=\"fnote\" data-spec=\"{}\"><b>{}</b>{}<div class=\"why\">{}: {}</div></div>", f.spec,
                       html_escape(f.text), w, f.spec, html_escape(spec_explanation(f.spec)));
  };

  std::ostringstream s;
  s << "<section class=\"timeline\"" << (t.id.empty() ? "" : fmt::format(" id=\"{}\"", html_escape(t.id))) << ">\n<h1>"
    << html_escape(t.title) << "</h1>\n";
  const std::string step_id = html_escape(t.id.empty() ? "step-" : t.id + "-step-");
  for (const auto& c : t.file.comments) s << "<p class=\"note\">" << html_escape(c) << "</p>\n";
  s << "<p class=\"scenario\">" << scenario_line(t.file) << "</p>\n<p class=\"summary\">backends ";
  for (size_t b = 0; b < nb; ++b) s << (b ? ", " : "") << html_escape(t.backends[b].name);
  s << " &middot; " << steps << " ops &middot; <span data-count=\"findings\">" << nfindings << "</span> findings";
  if (nb > 1) s << " &middot; <span data-count=\"differing\">" << differing << "</span> cells differ from the " << html_escape(t.backends[0].name);
  s << "</p>\n";
  for (const auto& n : t.notes) s << "<p class=\"note\">" << html_escape(n) << "</p>\n";
  if (notes.count(0)) {  // findings about the whole run (S8)
    s << "<h2>whole run</h2>";
    for (const auto& [f, who] : notes[0]) s << finding_note(*f, who);
  }
  if (nfindings) {
    s << "<p class=\"summary\">findings at ";
    bool first = true;
    for (const auto& [step, v] : notes)
      if (step > 0) {
        s << (first ? "" : ", ") << "<a href=\"#" << step_id << step << "\">step " << step << "</a>";
        first = false;
      }
    s << "</p>\n";
  }
  if (t.legend) s << timeline_legend() << "\n";
  s << "<div class=\"scroll\"><table class=\"tl\"><thead><tr><th rowspan=\"2\">step</th><th rowspan=\"2\">op</th>";
  for (const auto& rs : rank_cols) s << "<th colspan=\"" << backend_cols.size() << "\" class=\"ranks\">" << rank_label(rs) << "</th>";
  s << "<th rowspan=\"2\">findings and differences</th></tr>\n<tr>";
  for (size_t k = 0; k < rank_cols.size(); ++k)
    for (const auto& bs : backend_cols) s << "<th class=\"backends\">" << names_of(bs, ", ") << "</th>";
  s << "</tr></thead>\n<tbody>\n";
  for (int step = 1; step <= steps; ++step) {
    s << "<tr id=\"" << step_id << step << "\"><td class=\"step\">" << step << "</td><td class=\"op\">" << html_escape(op_texts[step]) << "</td>";
    std::set<int> differing_ranks;
    for (int r = 0; r < world; ++r)
      for (size_t b = 0; b < nb; ++b)
        if (marks[b].count({step, r})) differing_ranks.insert(r);
    for (const auto& rs : rank_cols)
      for (const auto& bs : backend_cols) {
        const size_t b = bs.front();
        const int r = rs.front();
        auto it = obs[b].find({step, r});
        auto mk = marks[b].find({step, r});
        const CellMarks* m = mk == marks[b].end() ? nullptr : &mk->second;
        std::string ranks;
        for (int x : rs) ranks += (ranks.empty() ? "" : " ") + std::to_string(x);
        const std::string attrs = fmt::format(" data-backend=\"{}\" data-backends=\"{}\" data-ranks=\"{}\"", html_escape(t.backends[b].name),
                                              names_of(bs, " "), ranks);
        if (it == obs[b].end()) {
          s << "<td class=\"cell idle" << (m ? " differs" : "") << "\" data-step=\"" << step << "\" data-rank=\"" << r << "\"" << attrs
            << " data-findings=\"\">not run on this rank</td>";
          continue;
        }
        s << cell_html(t.file.scenario, *it->second, findings_at(b, step, r), m, attrs);
      }
    s << "<td class=\"notes\">";
    for (const auto& [f, who] : notes[step]) s << finding_note(*f, who);
    if (!differing_ranks.empty()) {
      s << "<div class=\"dnote\">backends differ on rank";
      for (int r : differing_ranks) s << " " << r;
      s << " (the marked cells list each field)</div>";
    }
    s << "</td></tr>\n";
  }
  s << "</tbody></table></div>\n</section>\n";
  if (counts) *counts = {steps, nfindings, differing};
  return s.str();
}

}  // namespace fsdpsim
