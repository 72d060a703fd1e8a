#include "data.hpp"

#include <fstream>
#include <map>
#include <random>
#include <sstream>

namespace gpt2 {

namespace {
// Deterministic generated text: sentences from a small grammar, for machines without the file.
std::string generated_text() {
  const char* subj[] = {"the kernel", "a tensor", "the model", "every head", "the optimizer", "a gradient"};
  const char* verb[] = {"rounds", "computes", "accumulates", "scales", "updates", "normalizes"};
  const char* obj[] = {"the scores", "a softmax row", "the weights", "its output", "the loss", "every tile"};
  std::mt19937 rng(7);
  std::string s;
  for (int i = 0; i < 20000; ++i)
    s += std::string(subj[rng() % 6]) + " " + verb[rng() % 6] + " " + obj[rng() % 6] + (rng() % 3 ? ". " : ", and ");
  return s;
}
}  // namespace

Corpus load_corpus(const std::string& path) {
  Corpus c;
  std::ifstream f(path);
  std::string text;
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    c.source = path;
  }
  if (text.size() < 10000) {
    text = generated_text();
    c.source = "generated text (" + path + " not found)";
  }
  std::map<char, int64_t> ids;
  for (char ch : text) ids.emplace(ch, 0);
  int64_t next = 0;
  for (auto& [ch, id] : ids) id = next++;
  c.vocab = next;
  for (char ch : text) c.tokens.push_back(ids[ch]);
  return c;
}

std::pair<torch::Tensor, torch::Tensor> Corpus::batch(int64_t batch, int64_t block, torch::Generator& gen) const {
  const auto n = static_cast<int64_t>(tokens.size()) - block - 1;
  torch::Tensor starts = torch::randint(n, {batch}, gen, torch::kLong);
  torch::Tensor x = torch::empty({batch, block}, torch::kLong), y = torch::empty({batch, block}, torch::kLong);
  auto xa = x.accessor<int64_t, 2>(), ya = y.accessor<int64_t, 2>();
  auto sa = starts.accessor<int64_t, 1>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < block; ++t) {
      xa[b][t] = tokens[static_cast<std::size_t>(sa[b] + t)];
      ya[b][t] = tokens[static_cast<std::size_t>(sa[b] + t + 1)];
    }
  return {x, y};
}

}  // namespace gpt2
