// The HTML timeline of one sequence: ops down, ranks across (one column per
// backend under each rank), every cell the state the rank observed after the
// op; findings and backend differences marked at the op that caused them.
// One self-contained page: inline CSS and SVG, no script (the hunt's catalogue page
// adds a few lines for its filter), no network.
//
// The page shell (html_page) and the timeline section are separate so that a
// catalogue page can hold several timelines or link to them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "model/vocab/observation.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

// <, >, &, " and ' as entities.
std::string html_escape(const std::string& s);

// A whole page: doctype, the shared inline stylesheet, the title, then body.
std::string html_page(const std::string& title, const std::string& body);

// What a spec check guards, one sentence ("" for an unknown name).
std::string spec_explanation(const std::string& spec);

// One backend's run of the sequence.
struct TimelineBackend {
  std::string name;  // "model", "real", "upstream"
  std::vector<Observation> observations;
  std::vector<Finding> findings;
};

struct Timeline {
  std::string title;  // the file's name
  // The section's id and its steps' ("ID-step-4"), so several timelines share a page; "" for one
  // timeline alone (steps are "step-4").
  std::string id;
  SeqFile file;
  std::vector<TimelineBackend> backends;  // the first is the one the others are compared with
  std::vector<std::string> notes;         // extra header lines ("upstream: torch 2.13.0, ...")
  // Differences (observation_diff's lines) between the first backend and the named one that
  // the comparison leaves out, such as the fields the upstream pool cannot observe; none when empty.
  std::function<bool(const std::string& backend, const std::string& diff)> ignored;
  bool legend = true;  // false: the page draws timeline_legend() once for all its timelines
};

// The colour swatches and, in words, what each cell's abbreviations mean.
std::string timeline_legend();

// Counts drawn into the page, for the command line's summary.
struct TimelineCounts {
  int steps = 0;
  int findings = 0;         // distinct findings over every backend
  int differing_cells = 0;  // (step, rank, backend) cells that differ from the first backend's
};

// The <section> drawing t (no page shell); *counts filled when non-null. Columns that say
// the same are drawn once: ranks whose cells are identical on every backend at every step
// ("ranks 0-1"), and a backend that agrees with the first everywhere (its differences
// `ignored` aside) and has the same findings ("model, real").
std::string timeline_section(const Timeline& t, TimelineCounts* counts = nullptr);

// `path` relative to the directory of the page at `page` ("../out/hunt/S1-x.seq"), so
// that the page's links work wherever the two are moved together; "" stays "".
std::string page_relative(const std::string& path, const std::string& page);

// `fsdpsim report`'s opening box (sim/report/report_summary.cpp): the first finding (its step,
// a link to it, the spec's sentence), its root cause with verdict and fix from the
// catalogue, the patched switch that removes it, and the commands that reproduce it.
// `file` and `backends` as given on the command line; `page` where the page is written.
std::string report_summary_box(const Timeline& t, const std::string& file, const std::string& backends, const std::string& page);

}  // namespace fsdpsim
