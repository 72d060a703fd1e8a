// `lpdiag round X…`: how a value rounds in each narrow format, with the error and ulp. The quick
// way to check a claim like "this sum rounds away from zero".
#include <fmt/core.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"

namespace lpdiag::cli {
namespace {

struct RoundArgs {
  std::vector<std::string> values;
  std::vector<std::string> formats{"bf16", "fp16", "e4m3", "e5m2"};
  std::string mode = "rne";
  bool saturate = false;
  bool json = false;
};

double parse_value(const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size()) throw InvalidArgument("'" + s + "' is not a number");
  return v;
}

Rounding parse_mode(const std::string& m) {
  if (m == "rne") return Rounding::nearest_even;
  if (m == "rtz") return Rounding::toward_zero;
  if (m == "sr") return Rounding::stochastic;
  throw InvalidArgument("unknown rounding mode '" + m + "'; use rne, rtz or sr");
}

int run_round(const RoundArgs& a) {
  ConvertOptions opt;
  opt.rounding = parse_mode(a.mode);
  opt.overflow = a.saturate ? Overflow::saturate : Overflow::ieee;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& text : a.values) {
    const double x = parse_value(text);
    for (const auto& name : a.formats) {
      const FloatFormat& f = format_by_name(name);
      const std::uint32_t bits = encode(x, f, opt);
      const double r = decode(bits, f);
      const double err = r - x;
      const double u = ulp(x, f);
      if (a.json) {
        out.push_back({{"value", x}, {"format", f.name}, {"bits", bits}, {"rounded", r},
                       {"error", err}, {"error_ulps", err / u}, {"exact", r == x}});
      } else {
        std::cout << fmt::format("{:>22.17g}  {:<5} 0x{:0{}x}  -> {:<22.17g} err {:+.6g} ({:+.4f} ulp)\n", x,
                                 f.name, bits, (f.total_bits() + 3) / 4, r, err, err / u);
      }
    }
  }
  if (a.json) std::cout << out.dump(2) << "\n";
  return kOk;
}

}  // namespace

Registration register_round(CLI::App& app) {
  auto args = std::make_shared<RoundArgs>();
  CLI::App* sub = app.add_subcommand("round", "Show how values round to bf16, fp16 and FP8 (e4m3, e5m2)");
  sub->add_option("values", args->values, "Values to round (decimal or hex float)")->required();
  sub->add_option("-f,--format", args->formats, "Formats (bf16, fp16, e4m3, e5m2)");
  sub->add_option("-m,--mode", args->mode, "Rounding: rne (nearest even), rtz (toward zero), sr (stochastic, seed 0)");
  sub->add_flag("--saturate", args->saturate, "Clamp overflow to the largest finite value (OCP saturation mode)");
  sub->add_flag("--json", args->json, "Print one JSON array on stdout");
  return {sub, [args] { return run_round(*args); }};
}

}  // namespace lpdiag::cli
