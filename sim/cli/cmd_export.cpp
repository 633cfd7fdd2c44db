// `fsdpsim export FILE.seq --python`: the sequence as a self-contained torchrun
// script on the real libraries, written by the upstream backend's own package
// (real_backend/upstream/fsdpsim_upstream/export.py) from the canonical text
// and the effective profile.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "model/vocab/profile.hpp"
#include "real_backend/upstream/pool_client.hpp"
#include "sim/cli/commands.hpp"

namespace fsdpsim::cli {

int cmd_export(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "export expects exactly one FILE.seq");
  if (!a.python) throw SourceError("<command line>", {}, "export expects --python (the only format so far)");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  Profile profile = *profile_by_name(f.scenario.profile);
  for (const auto& o : f.scenario.overrides) apply_override(profile, o.name, o.value);
  std::string tmp = (std::filesystem::temp_directory_path() / "fsdpsim-export-XXXXXX").string();
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    std::cerr << "fsdpsim: cannot create a temporary file in " << std::filesystem::temp_directory_path() << "\n";
    return kInfra;
  }
  ::close(fd);
  {
    std::ofstream out(tmp);
    out << print_seq(f);
    if (!out.flush()) {
      std::remove(tmp.c_str());
      std::cerr << "fsdpsim: cannot write " << tmp << "\n";
      return kInfra;
    }
  }
  std::cout.flush();
  std::string error;
  int rc = upstream::run_python_module("fsdpsim_upstream.export", {tmp, "--switches", switches_json(profile), "--name", file},
                                       &error);
  std::remove(tmp.c_str());
  if (rc < 0) {
    std::cerr << "fsdpsim: " << error << "\n";
    return kInfra;
  }
  return rc == 0 ? kClean : rc == 3 ? kBadInput : kInfra;
}

}  // namespace fsdpsim::cli
