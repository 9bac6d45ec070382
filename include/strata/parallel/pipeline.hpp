// Pipeline schedules as policies (gpipe, one_f_one_b), the order of forward and backward
// micro-batches each stage runs, and the split of a model's layers into stages.
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace strata {

// All forwards, then all backwards: every micro-batch's activations live at once.
struct gpipe {
  static constexpr const char* name = "gpipe";
};
// One forward, one backward in the steady state: stage s keeps at most p - s
// micro-batches in flight (PipeDream-Flush / Megatron's default).
struct one_f_one_b {
  static constexpr const char* name = "1f1b";
};

template <class S>
concept pipeline_schedule = std::is_same_v<S, gpipe> || std::is_same_v<S, one_f_one_b>;

struct pipeline_action {
  bool forward;
  int micro_batch;
};

// The actions of `stage` (0-based) of `stages` for `micro_batches` micro-batches. Both
// schedules run backwards in micro-batch order 0, 1, ..., so gradients accumulate in the
// same order and the two give bitwise identical weights.
template <class Schedule>
std::vector<pipeline_action> schedule_for(int stage, int stages, int micro_batches) {
  std::vector<pipeline_action> a;
  a.reserve(2 * static_cast<std::size_t>(micro_batches));
  if constexpr (std::is_same_v<Schedule, gpipe>) {
    for (int m = 0; m < micro_batches; ++m) a.push_back({true, m});
    for (int m = 0; m < micro_batches; ++m) a.push_back({false, m});
  } else {
    const int warmup = std::min(stages - stage - 1, micro_batches);
    for (int m = 0; m < warmup; ++m) a.push_back({true, m});
    for (int m = warmup; m < micro_batches; ++m) {
      a.push_back({true, m});
      a.push_back({false, m - warmup});
    }
    for (int m = micro_batches - warmup; m < micro_batches; ++m) a.push_back({false, m});
  }
  return a;
}

// Splits layers with the given parameter counts into `stages` contiguous runs with the
// largest run as small as possible (each stage gets at least one layer). Returns the
// first layer of each stage plus the end: stages + 1 numbers.
inline std::vector<std::size_t> balance_stages(const std::vector<std::size_t>& layer_params, int stages) {
  const std::size_t L = layer_params.size();
  expects<config_error>(stages >= 1, [&] { return strata::cat("pipeline of ", stages, " stages: need at least 1"); });
  expects<config_error>(static_cast<std::size_t>(stages) <= L, [&] {
    return strata::cat("pipeline of ", stages, " stages for a model of ", L, " layers: every stage needs a layer");
  });
  // Binary search on the largest stage; a greedy pass checks whether a bound fits. A
  // layer without params still costs a little, so empty layers spread out too.
  std::vector<std::size_t> w(L);
  for (std::size_t i = 0; i < L; ++i) w[i] = layer_params[i] + 1;
  auto fits = [&](std::size_t bound, std::vector<std::size_t>* cuts) {
    std::size_t used = 0, sum = 0;
    if (cuts) cuts->assign(1, 0);
    for (std::size_t i = 0; i < L; ++i) {
      const std::size_t left_layers = L - i, left_stages = static_cast<std::size_t>(stages) - used - 1;
      if (w[i] > bound) return false;
      if ((sum + w[i] > bound || left_layers == left_stages) && sum > 0) {
        if (++used >= static_cast<std::size_t>(stages)) return false;
        if (cuts) cuts->push_back(i);
        sum = 0;
      }
      sum += w[i];
    }
    return true;
  };
  std::size_t lo = *std::max_element(w.begin(), w.end()), hi = 0;
  for (auto v : w) hi += v;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (fits(mid, nullptr))
      hi = mid;
    else
      lo = mid + 1;
  }
  // The greedy pass cuts whenever the layers left equal the stages left, so it always
  // makes exactly `stages` runs.
  std::vector<std::size_t> cuts;
  fits(lo, &cuts);
  cuts.push_back(L);
  return cuts;
}

// The layers [first, end) of stage `stage` of `stages`: from explicit cuts (stages + 1
// increasing layer indices from 0 to the layer count) or, when there are none, balanced
// by the layers' parameter counts.
inline std::pair<std::size_t, std::size_t> stage_layer_range(const std::vector<std::size_t>& layer_params,
                                                             std::vector<std::size_t> cuts, int stages, int stage) {
  const std::size_t L = layer_params.size();
  // One stage needs no cuts, but cuts given for it are still checked: a wrong list must
  // not pass silently only because the run has one stage.
  if (cuts.empty()) {
    if (stages == 1) return {0, L};
    cuts = balance_stages(layer_params, stages);
  }
  expects<config_error>(
      cuts.size() == static_cast<std::size_t>(stages) + 1 && cuts.front() == 0 && cuts.back() == L &&
          std::is_sorted(cuts.begin(), cuts.end()) && std::adjacent_find(cuts.begin(), cuts.end()) == cuts.end(),
      [&] { return strata::cat("pipeline_cuts must be ", stages + 1, " increasing layer indices from 0 to ", L); });
  return {cuts[static_cast<std::size_t>(stage)], cuts[static_cast<std::size_t>(stage) + 1]};
}

}  // namespace strata
