// strata-gpu: required
// The trainer in the CUDA space on one GPU, its runs: a checkpoint resumes to the
// uninterrupted weights; a bad target is the loss's own error, read back once per step,
// with no weight moved; a tied Qwen2 head shares its embedding's piece at every stage; a
// step of fixed shape allocates nothing after the second; a profiled step says how long
// the host issued work and waited for the device. (trainer/numbers.cu: the mlp's numbers.)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <strata/cuda.cuh>
#include <string>
#include <vector>

#include "catch.hpp"
#include "common.hpp"
#include "small_models.hpp"

using namespace trainer_test;

TEST_CASE("a GPU trainer with a checkpoint resumes to the uninterrupted weights") {
  auto s = setup();
  const auto whole = on_gpu<strata::zero<3>>(s);
  const auto dir = std::filesystem::temp_directory_path() / ("strata_cuda_trainer_" + std::to_string(::getpid()));
  {
    strata::trainer<mlp::model, strata::cuda, strata::zero<3>> tr(grid(), mlp::make_model(s.shape), s.opts);
    mlp::synthetic_data data(s.shape, s.seed);
    strata::batch<> b;
    for (long step = 0; step < 4; ++step) {
      data.fill(static_cast<std::uint64_t>(step * s.global_batch), s.global_batch, b);
      tr.step(b);
    }
    tr.save(dir);
  }
  strata::trainer<mlp::model, strata::cuda, strata::zero<1>> tr(grid(), mlp::make_model(s.shape), s.opts);
  tr.load(dir);
  mlp::synthetic_data data(s.shape, s.seed);
  strata::batch<> b;
  for (long step = 4; step < s.steps; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch), s.global_batch, b);
    tr.step(b);
  }
  CHECK(strata::weights_hash(tr.gather_master()) == whole.hash);
  std::filesystem::remove_all(dir);
}

// On the GPU the loss's target check is queued and read back once per step (not a wait
// per micro-batch); a bad target in the last micro-batch is still the host's message,
// raised before the update, and the trainer goes on with the next good batch.
TEST_CASE("a bad target in any micro-batch is the host's error, once per step, and no weight moves") {
  auto s = setup();
  s.opts.micro_batches = 4;
  mlp::synthetic_data data(s.shape, s.seed);
  strata::batch<> good, bad;
  data.fill(0, s.global_batch, good);
  data.fill(0, s.global_batch, bad);
  bad.targets.data()[bad.targets.numel() - 1] = 1e6f;  // the last row of the last micro-batch
  const auto message_of = [&](auto& tr) {
    try {
      tr.step(bad);
    } catch (const strata::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  strata::trainer<mlp::model> host(grid(), mlp::make_model(s.shape), s.opts);
  strata::trainer<mlp::model, strata::cuda, strata::zero<2>> gpu(grid(), mlp::make_model(s.shape), s.opts);
  const auto before = strata::weights_hash(gpu.gather_master());
  const std::string expected = message_of(host);
  REQUIRE(expected.find("softmax_cross_entropy: target 1e+06 at row 7") != std::string::npos);
  CHECK(message_of(gpu) == expected);
  CHECK(strata::weights_hash(gpu.gather_master()) == before);
  const auto h = host.step(good), g = gpu.step(good);
  CHECK(std::abs(g.loss - h.loss) <= 1e-4 * std::abs(h.loss));
  CHECK(strata::weights_hash(gpu.gather_master()) != before);
}

namespace {

// A tiny Qwen2 whose head is tied to its embedding: on one stage the two share one piece
// of the shard (bucket_plan's shares_piece; docs/architecture.md, "Tied params").
strata::models::qwen2_config tiny_tied() {
  auto c = test::small_qwen2_config();
  c.tie_word_embeddings = true;
  return c;
}

struct tied_result {
  std::vector<float> losses, master;
  std::uint64_t hash = 0;
  strata::memory_report memory;
  std::size_t late_allocations = 0;  // device allocations made by the steps after the second
};

template <class Sharding, class Space, class Precision = strata::fp32>
tied_result tied_run() {
  const auto cfg = tiny_tied();
  strata::trainer_options o = setup().opts;
  o.bucket_elems = 2048;  // the embedding and head alone, the decoder layers in several buckets
  strata::trainer<strata::models::qwen2, Space, Sharding, strata::adamw, Precision> tr(
      grid(), strata::models::make_qwen2(cfg), o);
  constexpr std::int64_t rows = 4, seq = 16;  // seq = the config's max_position_embeddings
  strata::batch<> b;
  b.inputs.resize({rows, seq});
  b.targets.resize({rows, seq});
  for (std::int64_t i = 0; i < rows * seq; ++i) {
    b.inputs[i] = static_cast<float>((i * 7 + 3) % cfg.vocab_size);
    b.targets[i] = static_cast<float>((i * 7 + 10) % cfg.vocab_size);
  }
  tied_result r;
  std::size_t allocations = 0;
  for (int s = 0; s < 5; ++s) {
    if (s == 2) allocations = strata::cuda::counters().allocations.load();
    r.losses.push_back(tr.step(b).loss);
  }
  r.late_allocations = strata::cuda::counters().allocations.load() - allocations;
  r.master = tr.gather_master();
  r.hash = strata::weights_hash(r.master);
  r.memory = tr.memory();
  return r;
}

}  // namespace

// The copy's gradient is added into the source's piece, its compute params written from
// the one master (mirror runs at ZeRO-1/2, the shared piece gathered at ZeRO-3, uploaded
// from the host when offloaded): every stage the same bits, both copies equal, and the
// host's weights within the fp32 bound of the mlp case above.
TEST_CASE("a tied head shares its embedding's piece on the GPU: every stage, offload, and the host") {
  using strata::cuda;
  const auto host = tied_run<strata::zero<1>, strata::host>();
  const auto r0 = tied_run<strata::replicated, cuda>();
  CHECK(tied_run<strata::zero<1>, cuda>().hash == r0.hash);
  CHECK(tied_run<strata::zero<2>, cuda>().hash == r0.hash);
  CHECK(tied_run<strata::zero<3>, cuda>().hash == r0.hash);
  CHECK(tied_run<strata::zero<2, strata::offload_optimizer>, cuda>().hash == r0.hash);
  CHECK(tied_run<strata::zero<3, strata::offload_optimizer>, cuda>().hash == r0.hash);
  const auto cfg = tiny_tied();
  const auto n = static_cast<long>(cfg.vocab_size) * cfg.hidden_size;  // gather_master: embedding first, head last
  CHECK(std::equal(r0.master.begin(), r0.master.begin() + n, r0.master.end() - n));
  for (std::size_t i = 0; i < host.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(r0.losses[i] - host.losses[i]) <= 1e-4 * std::abs(host.losses[i]));
  }
  CHECK(test::relative_distance(r0.master, host.master) < 1e-4);
  // One master for the tensor at ZeRO-1: as the host trainer counts it.
  CHECK(tied_run<strata::zero<1>, cuda>().memory.bytes.at("master") == host.memory.bytes.at("master"));
}

// A step of fixed shape allocates nothing on the device once the
// first two have made what they keep (the call scratch, cuDNN's plans, the comm
// buffers): every layout, fp32 and bf16 (fused attention where cuDNN takes the shape).
TEST_CASE("after the second step a GPU trainer allocates no device memory") {
  using strata::cuda;
  using bf = strata::mixed<strata::bf16>;
  CHECK(tied_run<strata::replicated, cuda>().late_allocations == 0);
  CHECK(tied_run<strata::zero<1>, cuda, bf>().late_allocations == 0);
  CHECK(tied_run<strata::zero<2>, cuda, bf>().late_allocations == 0);
  CHECK(tied_run<strata::zero<3>, cuda, bf>().late_allocations == 0);
  CHECK(tied_run<strata::zero<3, strata::offload_optimizer>, cuda, bf>().late_allocations == 0);
}

// The GPU profile's host lines: the host's span from the step's first mark to its last
// splits into the waits for the device (the loss's and the norm's readbacks, at least one
// a step) and the issuing; both inside the step's wall time. Profiling changes no weight.
TEST_CASE("a profiled GPU step says how long the host issued work and waited for the device") {
  auto s = setup();
  s.steps = 3;
  const auto plain = on_gpu<strata::zero<2>>(s);
  s.opts.profile = true;
  strata::trainer<mlp::model, strata::cuda, strata::zero<2>, strata::adamw, strata::fp32> tr(
      grid(), mlp::make_model(s.shape), s.opts);
  mlp::synthetic_data data(s.shape, s.seed);
  const long local = s.global_batch / grid().dp_size();
  strata::batch<> b;
  for (long step = 0; step < s.steps; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + grid().dp_rank() * local), local, b);
    const auto st = tr.step(b);
    const auto& p = tr.last_profile();
    INFO(strata::profile_table(p));
    CHECK(p.host_waited_for_device);
    CHECK(p.host_wait_seconds > 0);
    CHECK(p.host_issue_seconds > 0);
    CHECK(p.host_issue_seconds + p.host_wait_seconds <= st.seconds);
  }
  CHECK(strata::weights_hash(tr.gather_master()) == plain.hash);
}
