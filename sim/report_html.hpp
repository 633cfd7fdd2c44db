// The HTML timeline of one sequence: ops down, ranks across (one column per
// backend under each rank), every cell the state the rank observed after the
// op; findings and backend differences marked at the op that caused them.
// One self-contained page: inline CSS and SVG, no script, no network.
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
  // Differences (observation_diff's lines) the comparison leaves out, such as
  // the fields the upstream pool cannot observe; none when empty.
  std::function<bool(const std::string& diff)> ignored;
};

// Counts drawn into the page, for the command line's summary.
struct TimelineCounts {
  int steps = 0;
  int findings = 0;         // distinct findings over every backend
  int differing_cells = 0;  // (step, rank, backend) cells that differ from the first backend's
};

// The <section> drawing t (no page shell); *counts filled when non-null.
std::string timeline_section(const Timeline& t, TimelineCounts* counts = nullptr);

}  // namespace fsdpsim
