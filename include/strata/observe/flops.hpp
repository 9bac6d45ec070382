// Model FLOPs, for MFU (model FLOPs utilisation): what a training step must compute by
// the model's own count, against what the machine could at its peak.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include "../space/host_ops.hpp"

namespace strata {

// FLOPs of one token's forward and backward pass, as PaLM's MFU counts them (Chowdhery et
// al. 2022, appendix B): 6 per parameter (a multiply-add forward, two backward), plus
// attention's score and value products, 12 · layers · width · seq, which no parameter
// holds. `params` are those that multiply: leave the input lookup tables out (token and
// position embeddings; a head, tied to the token table or not, is a product and counts),
// as Megatron's count does. A model without attention leaves layers at 0; for one sample
// of a non-sequence model, the token is the sample.
inline double train_flops_per_token(double params, double layers = 0, double width = 0, double seq = 0) {
  return 6.0 * params + 12.0 * layers * width * seq;
}

// This process's peak FLOP/s on the host as its BLAS reaches it, with the host space's
// threads: the best of a few square fp32 GEMMs of side n (about 0.1 s at n = 512 on two
// cores). Other processes on the machine running at the same time share the cores, so
// measure on every rank together.
inline double measure_host_peak_flops(int n = 512, int reps = 5) {
  std::vector<float> a(static_cast<std::size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size());
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ops<host>::gemm({}, transpose::no, transpose::no, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s);
  }
  return best;
}

}  // namespace strata
