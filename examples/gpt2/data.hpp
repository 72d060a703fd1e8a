// Training text for the example: a text file a Debian package ships (the GPL-3 text from
// base-files, present on every Debian system), or generated text when it is missing. Nothing
// is downloaded and no third-party text is committed. Character-level tokens.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

namespace gpt2 {

struct Corpus {
  std::string source;  // where the text came from
  std::vector<int64_t> tokens;
  int64_t vocab = 0;
  // A random batch of (x, y) with y = x shifted by one token.
  std::pair<torch::Tensor, torch::Tensor> batch(int64_t batch, int64_t block, torch::Generator& gen) const;
};

Corpus load_corpus(const std::string& path);

}  // namespace gpt2
