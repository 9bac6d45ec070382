// The rows a training step reads from a token file (the contract tests and users rely
// on): window i is tokens [i seq, i seq + seq + 1); step s of global batch B takes windows
// [s B, (s + 1) B), wrapping at the end of the file (an epoch), in a per-epoch permutation
// when shuffled; inputs are a window's first seq tokens, labels its last seq; data-parallel
// rank r takes its contiguous share of the rows. A mask file of the same layout says per
// token whether it is trained on as a label (1) or not (0: its target is ignore_label).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../space/ops.hpp"
#include "../space/tensor.hpp"
#include "token_file.hpp"

namespace strata {

class token_windows {
 public:
  // seq tokens per row, global_batch rows per step; shuffle_seed permutes the windows of
  // each epoch (deterministically: the same seed gives the same order on every rank).
  token_windows(const token_file& tokens, std::int64_t seq, std::int64_t global_batch,
                std::optional<std::uint64_t> shuffle_seed = std::nullopt)
      : tokens_(tokens), seq_(seq), batch_(global_batch), seed_(shuffle_seed) {
    expects<config_error>(seq > 0 && global_batch > 0, [&] {
      return cat("token windows: seq ", seq, " and batch ", global_batch, " must be positive");
    });
    expects<config_error>(tokens.size() >= static_cast<std::uint64_t>(seq) + 1, [&] {
      return cat(tokens.path(), ": ", tokens.size(), " tokens, fewer than one window of seq + 1 = ", seq + 1);
    });
    windows_ = (tokens.size() - 1) / static_cast<std::uint64_t>(seq);
  }

  // Labels where mask[i] is 0 (i the label's token) become ignore_label. The mask must
  // count as many tokens as the token file and hold only 0 and 1.
  void set_mask(const token_file& mask) {
    expects<config_error>(mask.size() == tokens_.size(), [&] {
      return cat(mask.path(), ": ", mask.size(), " mask values for the ", tokens_.size(), " tokens of ", tokens_.path(),
                 "; a mask has one value per token");
    });
    for (std::uint64_t i = 0; i < mask.size(); ++i)
      if (mask[i] > 1)
        throw checkpoint_error(cat(mask.path(), ": mask value ", mask[i], " at offset ", mask.offset_of(i), " (token ",
                                   i, ") is not 0 or 1"));
    mask_ = &mask;
  }

  std::uint64_t windows() const noexcept { return windows_; }
  std::int64_t seq() const noexcept { return seq_; }
  std::int64_t global_batch() const noexcept { return batch_; }

  // The window global row j of step s reads.
  std::uint64_t window_of(std::uint64_t step, std::uint64_t row) const {
    const std::uint64_t k = step * static_cast<std::uint64_t>(batch_) + row;
    const std::uint64_t epoch = k / windows_, at = k % windows_;
    if (!seed_) return at;
    if (perm_epoch_ != epoch) make_permutation(epoch);
    return perm_[at];
  }

  // This data-parallel rank's rows of step s: inputs and targets [rows, seq], token ids
  // as floats (a trainer's batch<>.inputs and .targets).
  void fill(std::uint64_t step, int dp_rank, int dp_size, tensor<float>& inputs, tensor<float>& targets) const {
    expects<config_error>(dp_size > 0 && batch_ % dp_size == 0, [&] {
      return cat("token windows: a global batch of ", batch_, " rows does not split over ", dp_size,
                 " data-parallel ranks");
    });
    const std::int64_t rows = batch_ / dp_size;
    inputs.resize({rows, seq_});
    targets.resize({rows, seq_});
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint64_t w = window_of(step, static_cast<std::uint64_t>(dp_rank * rows + r));
      const std::uint64_t first = w * static_cast<std::uint64_t>(seq_);
      for (std::int64_t t = 0; t < seq_; ++t) {
        inputs[r * seq_ + t] = static_cast<float>(tokens_[first + t]);
        const bool trained = !mask_ || (*mask_)[first + t + 1] != 0;
        targets[r * seq_ + t] = trained ? static_cast<float>(tokens_[first + t + 1]) : ignore_label;
      }
    }
  }

 private:
  // Fisher-Yates over the windows, from the epoch's own random stream.
  void make_permutation(std::uint64_t epoch) const {
    perm_.resize(windows_);
    for (std::uint64_t i = 0; i < windows_; ++i) perm_[i] = i;
    const random_stream draw(*seed_, cat("windows epoch ", epoch));
    for (std::uint64_t i = windows_; i > 1; --i) std::swap(perm_[i - 1], perm_[draw.bits(i) % i]);
    perm_epoch_ = epoch;
  }

  const token_file& tokens_;
  const token_file* mask_ = nullptr;
  std::int64_t seq_, batch_;
  std::optional<std::uint64_t> seed_;
  std::uint64_t windows_ = 0;
  mutable std::vector<std::uint64_t> perm_;
  mutable std::uint64_t perm_epoch_ = UINT64_MAX;  // the epoch perm_ is for (none yet)
};

}  // namespace strata
