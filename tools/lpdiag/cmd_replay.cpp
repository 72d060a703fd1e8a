// `lpdiag replay CAPTURE.h5 --policy P[,P…] --fix F[,F…] [--tile N] [--json]`: the captured
// attention inputs of one layer at one step, forward and backward under every combination of
// numerics, against the fp64 reference. `recorded` in either list is the spec the capture was
// recorded under, as written in it (its policy with its tile, its fix with its parameters). Two rows come first: `exact-rounding` (the fp64 result
// rounded once to bf16, the best a bf16 output can do) and, when the capture holds the `o` the
// kernel produced, `recorded` (that kernel judged on its own inputs).
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attention_report.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/capture.hpp"
#include "lpdiag/trace/preflight.hpp"

namespace lpdiag::cli {
namespace {

struct ReplayArgs {
  std::string path;
  std::string policies = "fa2";
  std::string fixes = "none";
  int tile = 0;  // 0: each policy's own key tile (64, or its ":tile=N")
  bool json = false;
};

// The comma-separated list without its `recorded` entries; `had` says whether there were any.
std::string without_recorded(const std::string& list, bool& had) {
  std::string rest, item;
  std::stringstream ss(list);
  had = false;
  while (std::getline(ss, item, ',')) {
    if (item == "recorded") had = true;
    else rest += (rest.empty() ? "" : ",") + item;
  }
  return rest;
}

int run_replay(const ReplayArgs& a) {
  bool recorded_policy = false, recorded_fix = false;
  const std::string policy_rest = without_recorded(a.policies, recorded_policy), fix_rest = without_recorded(a.fixes, recorded_fix);
  // The lists are checked before the file is read: a typo is reported as such.
  auto policies = policy_rest.empty() ? std::vector<AttentionConfig>{} : parse_policy_list(policy_rest);
  auto fixes = fix_rest.empty() ? std::vector<FixConfig>{} : parse_fix_list(fix_rest);
  if (policies.empty() && !recorded_policy) throw InvalidArgument("no policy given");
  if (fixes.empty() && !recorded_fix) throw InvalidArgument("no fix given");
  if (a.tile < 0) throw InvalidArgument("--tile must be >= 1 (or 0: each policy's own)");
  preflight_capture(a.path);
  const AttentionCapture cap = read_capture(a.path);
  try {
    if (recorded_policy) policies.insert(policies.begin(), parse_policy_spec(cap.policy));
    if (recorded_fix) fixes.insert(fixes.begin(), parse_fix(cap.fix));
  } catch (const Error& e) {
    throw InvalidArgument(a.path + ": its recorded spec (policy '" + cap.policy + "', fix '" + cap.fix + "') cannot be replayed: " + e.what());
  }
  AttentionInputs in{cap.q.data(), cap.k.data(), cap.v.data(), cap.dout.data(), cap.B, cap.H, cap.N, cap.d};
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json exact_json, recorded_json;
  if (!a.json) {
    std::cout << a.path << ": step " << cap.step << ", layer " << cap.layer_index << " (" << cap.layer << "), B" << cap.B
              << " H" << cap.H << " N" << cap.N << " d" << cap.d << (cap.causal ? " causal" : " non-causal")
              << ", recorded under " << cap.policy << " fix " << cap.fix << "\n"
              << format_table_header() << "\n";
  }
  // The reference (fp64, forward only), exact rounding, and the recorded kernel output.
  {
    if (!a.json) std::cerr << "computing the fp64 reference ...\r" << std::flush;
    const ExactReference er = exact_reference(in, cap.causal, cap.scale);
    const AttentionRun& ref = er.reference;
    const AttentionSummary& ex = er.exact;
    if (a.json) exact_json = to_json(ex);
    else std::cout << format_table_row(ex) << "\n";
    if (!cap.o.empty()) {
      const AttentionSummary rs = summarize_output("recorded", "-", output_errors(ref, cap.o.data(), cap.dout.data()));
      if (a.json)
        recorded_json = {{"o_err_mean", rs.o_err_mean}, {"o_err_z", rs.o_err_z},       {"o_err_rms", rs.o_err_rms},
                         {"nan_count", rs.nan_count},   {"delta_err_z", rs.delta_err_z}, {"o_err_worst_column_z", rs.o_err_worst_column_z}};
      else
        std::cout << format_table_row(rs) << "   <- the kernel output recorded in the capture\n";
    }
  }
  for (AttentionConfig c : policies) {
    for (const FixConfig& f : fixes) {
      c.fix = f;
      if (a.tile > 0) c.tile_q = c.tile_k = a.tile;
      c.causal = cap.causal;
      c.scale = cap.scale;
      if (!a.json) std::cerr << "replaying " << policy_name(c.policy) << " / " << f.name() << " ...\r" << std::flush;
      const AttentionSummary s = summarize(c, run_attention(c, in));
      if (a.json) results.push_back(to_json(s));
      else std::cout << format_table_row(s) << "\n";
    }
  }
  if (a.json) {
    nlohmann::json out{{"capture", a.path}, {"exact_rounding", exact_json}, {"results", results}};
    if (!recorded_json.is_null()) out["recorded"] = recorded_json;
    std::cout << out.dump(2) << "\n";
  }
  return kOk;
}

}  // namespace

Registration register_replay(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* sub = app.add_subcommand("replay", "Replay a captured attention step under other numerics (policies x fixes)");
  sub->add_option("capture", args->path, "Capture file (NAME.capture.<step>.<layer>.h5)")->required();
  sub->add_option("-p,--policy", args->policies, "Comma-separated policies: fa2, seed, seed-mma, fp32, fp8-p, fp8-p:e5m2, NAME:tile=K, or recorded (the capture's own)")->capture_default_str();
  sub->add_option("-f,--fix", args->fixes, "Comma-separated fixes: none, paper, safe, sr; parameters as paper:beta=7,tol=1e-3; or recorded (the capture's own)")->capture_default_str();
  sub->add_option("--tile", args->tile, "Query and key tile size for every policy (0: each policy's own, 64 or its :tile=K)")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object {capture, exact_rounding, recorded (when the capture holds o), results:[...]} on stdout");
  return {sub, [args] { return run_replay(*args); }};
}

}  // namespace lpdiag::cli
