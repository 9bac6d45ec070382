// qwen2 --plan: each rank's bytes for a layout, before launch and without allocating the
// model: the parameter state from strata::plan_memory, the activations from the shapes
// of what Qwen2's layers keep per micro-batch (docs/architecture.md, "Where each state lives"); with
// --device cuda, the device's bytes too: the report's device part plus the context,
// cuBLAS, the communicators and the first step's code (strata::plan_device_allowance).
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <strata/models/qwen2.hpp>
#include <strata/train/memory_plan.hpp>

#include "../common/loop.hpp"
#include "run.hpp"

namespace qwen2 {

// The bytes the layers [first, end) of the model (embedding 0, decoder layers 1..L, norm
// L + 1, the head with its loss L + 2) hold over a step: per schedule slot in use, each layer's
// output and cache (what its backward reads); once, the gradients between layers (the
// trainer keeps three: the stage's input's, and two that the boundaries inside it take
// in turns, each as large as the largest it holds), the last stage's targets, and the
// tensors a decoder layer uses only within one call (the gradients inside it, a GPU's
// score blocks: the trainer's one set for every layer, space/call_scratch.hpp). rows is
// a micro-batch's. With recompute a decoder layer keeps its output only, and one scratch
// cache (with the output made again) serves them all.
// Activations take act bytes each (2 on a GPU in mixed precision, 4 otherwise); ids,
// targets and per-row statistics are floats (f), the loss's row sums doubles.
inline std::size_t activation_bytes(const strata::models::qwen2_config& c, std::size_t rows, std::size_t seq, int tp,
                                    std::size_t first, std::size_t end, std::size_t slots, bool device, bool recompute,
                                    std::size_t act = 4, bool fused = false) {
  constexpr std::size_t f = sizeof(float), f64 = sizeof(double);
  const std::size_t L = static_cast<std::size_t>(c.num_hidden_layers), N = rows * seq;
  const std::size_t D = static_cast<std::size_t>(c.hidden_size), hd = static_cast<std::size_t>(c.head_dim());
  const std::size_t H = static_cast<std::size_t>(c.num_attention_heads / tp);
  const std::size_t KV = static_cast<std::size_t>(c.num_key_value_heads / tp);
  const std::size_t I = static_cast<std::size_t>(c.intermediate_size / tp);
  const std::size_t V = static_cast<std::size_t>(c.vocab_size / tp);
  // What attention keeps of its softmax. The host, and a GPU's fused attention (cuDNN,
  // 16-bit activations: `fused`), a log-sum-exp per row; the host's blocks' scratch is a
  // few 64 x 64 blocks per thread, not counted; cuDNN's deterministic backward borrows a
  // workspace of the scores' gradient in 16 bits for a chunk of batch rows and heads kept
  // within STRATA_ATTENTION_WORKSPACE_MIB, once. A GPU's unfused attention
  // keeps the probabilities, [rows, H, seq, seq], with call scratch batching the heads of
  // a batch row (no grouping) or the batch rows of a head: the scores and their gradient
  // in float, and with 16-bit activations the gradient again as their type (the GEMMs'
  // operand) and, for grouped heads, the float sums of dk and dv over a group.
  const std::size_t inner = H == KV && H >= rows ? H : rows;
  std::size_t softmax = rows * H * seq * f, scores = 0, workspace = 0;
  if (device && fused) {
    workspace = static_cast<std::size_t>(
        strata::nn::fused_attention_workspace_bytes(static_cast<std::int64_t>(rows), static_cast<std::int64_t>(seq),
                                                    static_cast<std::int64_t>(H), static_cast<std::int64_t>(KV)));
  } else if (device) {
    softmax = rows * H * seq * seq * act;
    scores = inner * seq * seq * f;
    if (act != f) scores += inner * seq * seq * act + (H != KV ? 2 * inner * seq * hd * f : 0);
  }
  std::size_t per_slot = 0, shared = 0, scratch = 0, call = 0;  // bytes
  std::vector<std::size_t> grad(end - first + 1);               // per boundary: the gradient there
  for (std::size_t l = first; l < end; ++l) {
    std::size_t& dx = grad[l - first];
    if (l == 0) {  // embedding: output; its "input gradient" has the ids' shape
      per_slot += N * D * act;
      dx = N * f;
    } else if (l <= L) {                                        // decoder layer
      const std::size_t attention = N * H * hd * 2 * act        // q, attended
                                    + N * KV * hd * 2 * act     // k, v
                                    + seq * hd * f              // cos, sin
                                    + softmax                   // see above
                                    + N * f;                    // the norm's rstd
      const std::size_t mlp = N * I * 2 * act + N * f;          // gate, up; rstd
      const std::size_t cache = attention + mlp + N * D * act;  // and h
      per_slot += N * D * act + (recompute ? 0 : cache);        // the output, and the cache
      dx = N * D * act;
      if (recompute) scratch = cache + N * D * act;
      // Within one call: the layer's n1, n2 (made again in backward), dn2, dh, dn1;
      // attention's d_attended, dq, dk, dv and score blocks; the MLP's h (made again in
      // backward, then d_up), dh (then d_gate). The projections' input gradients add up in
      // the layer's own (nn::shared_input_backward).
      call = N * D * 5 * act + (N * H * hd * 2 + N * KV * hd * 2) * act + scores + N * I * 2 * act;
    } else if (l == L + 1) {  // final norm
      per_slot += N * D * act + N * f;
      dx = N * D * act;
    } else {  // the head with its loss: one chunk's logits (their gradient in place), the
              // value, row max, log-sum, target (f32); row loss (f64), a chunk's two sums (f64)
      const std::size_t C =
          static_cast<std::size_t>(strata::nn::make_linear_cross_entropy(c.hidden_size, c.vocab_size, 0, tp)
                                       .chunk_rows(static_cast<std::int64_t>(N)));
      per_slot += C * V * act + (1 + 3 * N) * f + (N + 2 * C) * f64;
      dx = N * D * act;
      shared += N * f;  // the targets
    }
  }
  // The gradient at the stage's end: the loss's seed, or what a later stage sends back.
  grad.back() = end == L + 3 ? f : N * D * act;
  std::size_t odd = 0, even = 0;
  for (std::size_t b = 1; b < grad.size(); ++b) {
    std::size_t& turn = b % 2 ? odd : even;
    turn = std::max(turn, grad[b]);
  }
  shared += grad[0] + odd + even;
  // The stage's input: ids on the first stage, the previous stage's output elsewhere.
  per_slot += first == 0 ? N * f : N * D * act;
  return per_slot * slots + shared + scratch + call + workspace;
}

// Schedule slots a stage keeps: one without a pipeline, K with GPipe, pp - stage with 1F1B.
inline std::size_t slots_in_use(int pp, int stage, int micro_batches, const std::string& schedule) {
  if (pp == 1) return 1;
  if (schedule == "gpipe") return static_cast<std::size_t>(micro_batches);
  return static_cast<std::size_t>(std::min(micro_batches, pp - stage));
}

// The plan of every stage, for the chosen ZeRO stage and for 0-3 side by side.
inline nlohmann::json plan_json(const run_options& o, const examples::loop_options& lo,
                                const strata::trainer_options& opts, const strata::runtime_policies& pol, int world,
                                bool device) {
  strata::plan_layout l;
  l.tp = o.tp;
  l.pp = o.pp;
  l.dp = world / (o.tp * o.pp);
  l.mixed = pol.precision != "fp32";
  l.device = device;
  l.bucket_elems = opts.bucket_elems;
  l.pipeline_cuts = opts.pipeline_cuts;
  const std::size_t rows = static_cast<std::size_t>(lo.batch / l.dp / opts.micro_batches);
  nlohmann::json j;
  j["layout"] = {{"world", world},
                 {"tp", l.tp},
                 {"dp", l.dp},
                 {"pp", l.pp},
                 {"zero", pol.zero_stage},
                 {"offload", pol.offload},
                 {"offload_params", opts.offload_params},
                 {"precision", pol.precision},
                 {"micro_batches", opts.micro_batches},
                 {"rows_per_micro_batch", rows},
                 {"recompute", opts.recompute},
                 {"seq", o.seq}};
  // Which attention the device plan counts: cuDNN's keeps a log-sum-exp per row, the
  // unfused one the probabilities; only a build with cuDNN's frontend can take the first.
  const bool fused = device && l.mixed && strata::nn::fused_attention_built;
  if (device) j["layout"]["attention"] = fused ? "fused (cuDNN)" : "unfused";
  for (int z = 0; z <= 3; ++z) {
    l.zero_stage = z;
    l.offload = pol.offload && z > 0;
    l.offload_params = opts.offload_params && z == 3;
    nlohmann::json stages = nlohmann::json::array();
    for (int s = 0; s < l.pp; ++s) {
      auto m = strata::models::make_qwen2(o.model, 0, l.tp);
      std::pair<std::size_t, std::size_t> layers;
      strata::plan_memory(m, l, s, 0, &layers);  // this stage's layers first
      const std::size_t act = activation_bytes(o.model, rows, static_cast<std::size_t>(o.seq), l.tp, layers.first,
                                               layers.second, slots_in_use(l.pp, s, opts.micro_batches, pol.schedule),
                                               device, !opts.recompute.empty(), device && l.mixed ? 2 : 4, fused);
      const strata::memory_report planned = strata::plan_memory(m, l, s, act);
      auto r = planned.to_json();
      r["layers"] = {layers.first, layers.second};
      if (device) {
        const auto extra = strata::plan_device_allowance(l);
        r["device"] = {
            {"report_bytes", planned.device_bytes()}, {"context_bytes", extra.context},
            {"cublas_bytes", extra.cublas},           {"comm_bytes", extra.comms},
            {"first_use_bytes", extra.first_use},     {"total_bytes", planned.device_bytes() + extra.total()}};
      }
      stages.push_back(r);
    }
    j["zero"][std::to_string(z)] = stages;
  }
  return j;
}

inline void print_plan(const run_options& o, const examples::loop_options& lo, const strata::trainer_options& opts,
                       const strata::runtime_policies& pol, int world, bool device) {
  const nlohmann::json j = plan_json(o, lo, opts, pol, world, device);
  const auto& lay = j["layout"];
  std::printf(
      "memory plan per rank (MiB): %d processes = tp %d x dp %d x pp %d, %s, %d micro-batches of %zu x %ld "
      "tokens%s%s%s\n",
      world, lay["tp"].get<int>(), lay["dp"].get<int>(), lay["pp"].get<int>(), pol.precision.c_str(),
      opts.micro_batches, lay["rows_per_micro_batch"].get<std::size_t>(), o.seq,
      pol.offload ? ", optimizer offloaded to host memory (ZeRO 1-3)" : "",
      opts.offload_params && device ? ", parameters offloaded to host memory (ZeRO 3)" : "",
      opts.recompute.empty() ? "" : ", decoder layers recomputed");
  const char* cats[] = {"params",       "param_shard",     "grads",       "master",     "optimizer_states",
                        "comm_buffers", "offload_staging", "activations", "io_staging", "total"};
  for (std::size_t s = 0; s < j["zero"]["0"].size(); ++s) {
    if (j["zero"]["0"].size() > 1) std::printf("pipeline stage %zu:\n", s);
    std::printf("  %-18s", "");
    for (int z = 0; z <= 3; ++z) std::printf("  %14s%d%s", "ZeRO-", z, z == pol.zero_stage ? "*" : " ");
    std::printf("\n");
    for (const char* c : cats) {
      std::printf("  %-18s", c);
      for (int z = 0; z <= 3; ++z) {
        const auto& r = j["zero"][std::to_string(z)][s];
        std::printf("  %15.1f ", r.value(c, 0.0) / (1 << 20));
      }
      std::printf("\n");
    }
    std::printf("  %-18s", "of which host");
    for (int z = 0; z <= 3; ++z)
      std::printf("  %15.1f ", j["zero"][std::to_string(z)][s].value("host_offloaded", 0.0) / (1 << 20));
    std::printf("\n");
    if (!device) continue;
    // The device's bytes: the report's part there, and what a GPU process holds besides.
    const std::pair<const char*, const char*> rows[] = {
        {"device: report", "report_bytes"}, {"  + CUDA context", "context_bytes"}, {"  + cuBLAS", "cublas_bytes"},
        {"  + comm (NCCL)", "comm_bytes"},  {"  + first use", "first_use_bytes"},  {"device total", "total_bytes"}};
    for (const auto& [label, key] : rows) {
      std::printf("  %-18s", label);
      for (int z = 0; z <= 3; ++z)
        std::printf("  %15.1f ", j["zero"][std::to_string(z)][s]["device"].value(key, 0.0) / (1 << 20));
      std::printf("\n");
    }
  }
  std::printf("(* the chosen stage; the trainer's report after a step holds these numbers)\n");
  if (device) {
    std::printf(
        "(device: the report's part on the GPU, plus estimates for CUDA 13 on an H200 of what a process holds "
        "besides,\n as train/memory_plan.hpp states them; a run measures each: --report's memory_per_rank[].device)\n");
    if (lay["attention"] == "unfused")
      std::printf("(attention unfused: each layer keeps its [rows, heads, seq, seq] probabilities%s)\n",
                  pol.precision == "fp32" ? ", as fp32 always does on a GPU"
                                          : "; this program was built without cuDNN's frontend, which a 16-bit run "
                                            "uses to keep a log-sum-exp per row instead");
  }
  examples::write_report(lo.report, j);
}

}  // namespace qwen2
