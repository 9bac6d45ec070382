// strata-ranks: 1 4
// Qwen2 against transformers (tests/data/qwen2_tiny, made by tests/tools/make_qwen2_fixture.py):
// the Hugging Face directory loads, the logits and the loss are transformers', and so are
// the weights after 3 AdamW steps, every step's grad_norm, and (through one SGD step) the
// gradients of a few tensors, in fp32 and in bf16; an export reads back with the same
// tensors. At 4 ranks the tied model trains at tp 2 x dp 2, pp 2 x dp 2 (embedding and
// head on different stages), tp 2 x pp 2 and dp 4 with ZeRO 0-3, with and without
// offload, as one process does and with transformers' gradients.
//
// Why gradients: AdamW's step does not change when a gradient is multiplied by a positive
// constant (its first step is lr * sign(g)), so the weights after AdamW steps cannot tell
// a sum from a mean, a replicated gradient summed over the tensor group, or a missing
// 1 / dp. grad_norm and an SGD step (w - lr g) show the scale. Mutations that fail them
// (train/detail/trainer_body.hpp's step(), one line after tied_.sum_grads()): multiply the
// grad shard by grid_.tp_size() (every tp layout's grad_norm and SGD gradients 2x
// transformers'; of the weight checks only the 1e-5 one notices, through AdamW's eps,
// 1.0e-4), or multiply only the tp-replicated params' part (the norms' gradients summed
// over the tensor group: grad_norm 3.3 % off, their SGD gradients 2x, while every weight
// after AdamW stays within 3.5e-6 of one process and passes).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/models/qwen2.hpp>
#include <strata/models/qwen2_io.hpp>
#include <strata/strata.hpp>

#include "catch.hpp"
#include "relative_distance.hpp"
#include "shared_dir.hpp"

using namespace strata;
namespace fs = std::filesystem;
using models::qwen2;

namespace {

const fs::path fixture_dir = fs::path(STRATA_TEST_DATA_DIR) / "qwen2_tiny";
constexpr int steps = 3;

struct fixture {
  safetensors_file file = safetensors_file::open(fixture_dir / "fixture.safetensors");
  std::vector<std::int32_t> tokens = file.read_all<std::int32_t>("tokens");
  std::int64_t rows = file.info("tokens").shape[0], seq = file.info("tokens").shape[1] - 1;
  std::vector<std::int32_t> mask = file.read_all<std::int32_t>("label_mask");
  std::vector<float> after(const std::string& hf_name, bool masked = false) const {
    return file.read_all<float>((masked ? "masked_after." : "after.") + hf_name);
  }
  // This data-parallel rank's rows: inputs are a row's first seq tokens, targets its last
  // seq (ignore_label where the fixture's label mask is 0, when masked).
  batch<> rows_of(int dp_rank, int dp_size, bool masked = false) const {
    const std::int64_t local = rows / dp_size;
    batch<> b;
    b.inputs.resize({local, seq});
    b.targets.resize({local, seq});
    for (std::int64_t r = 0; r < local; ++r)
      for (std::int64_t s = 0; s < seq; ++s) {
        const std::int64_t row = dp_rank * local + r;
        b.inputs[r * seq + s] = static_cast<float>(tokens[row * (seq + 1) + s]);
        b.targets[r * seq + s] =
            masked && mask[row * seq + s] == 0 ? ignore_label : static_cast<float>(tokens[row * (seq + 1) + s + 1]);
      }
    return b;
  }
};

const fixture& data() {
  static const fixture f;
  return f;
}

// transformers' AdamW of the fixture: lr 1e-2, betas (0.9, 0.999), eps 1e-8, decay 0.01
// on matrices and embeddings (strata's default decay flags), constant lr.
trainer_options options() {
  trainer_options o;
  o.schedule = lr_schedule::constant(1e-2);
  o.bucket_elems = 3000;  // several buckets, so pieces cross param boundaries
  return o;
}

template <class S, class O = adamw, class P = fp32>
using qwen2_trainer = trainer<qwen2, host, S, O, P>;

// The fixture's model on grid g, its weights loaded.
template <class S, class P = fp32>
struct loaded_qwen2 : qwen2_trainer<S, adamw, P> {
  loaded_qwen2(grid<world_comm>& g, const models::qwen2_config& cfg, const trainer_options& o = options())
      : qwen2_trainer<S, adamw, P>(g, models::make_qwen2(cfg, g.tp_rank(), g.tp_size()), o,
                                   adamw{.weight_decay = 0.01f}) {
    models::load_qwen2_weights(*this, fixture_dir);
  }
};

// What a run gives: the loss and grad_norm of each step, and the weights after them.
struct run_result {
  std::vector<float> losses, master;
  std::vector<double> grad_norms;
  std::size_t activation_bytes = 0;
};

template <class S, class P = fp32>
run_result train(grid<world_comm>& g, const models::qwen2_config& cfg, bool masked = false,
                 const trainer_options& o = options()) {
  loaded_qwen2<S, P> tr(g, cfg, o);
  const batch<> b = data().rows_of(g.dp_rank(), g.dp_size(), masked);
  run_result r;
  for (int s = 0; s < steps; ++s) {
    const step_stats st = tr.step(b);
    r.losses.push_back(st.loss);
    r.grad_norms.push_back(st.grad_norm);
  }
  r.activation_bytes = tr.activation_bytes();
  r.master = tr.gather_master();
  // The streamed hash (no rank holds the model) is the hash of the gathered one.
  CHECK(weights_hash_of(tr) == weights_hash(r.master));
  return r;
}

// The full tensors of a trainer's master, by transformers' name (tied copies left out).
std::vector<std::pair<std::string, std::vector<float>>> by_name(const flat_layout& layout, const qwen2& m,
                                                                const std::vector<float>& master) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  std::size_t at = 0, i = 0;
  for_each_param(m, [&](const auto& p, std::string_view) {
    const auto& slot = layout.params()[i++];
    const std::size_t n = (p.sharded() ? p.full_shape : p.shape).numel();
    if (slot.tied_to.empty() && n != 0)
      out.emplace_back(
          models::qwen2_hf_name(slot.name),
          std::vector<float>(master.begin() + static_cast<long>(at), master.begin() + static_cast<long>(at + n)));
    at += n;
  });
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE_FALSE(a.empty());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// ---- gradients against transformers' --------------------------------------------------
//
// Tolerances, relative to transformers' values (measured: the largest over every layout
// of this file, with Open MPI 4 on Debian 12):
// - fp32: the same float math in another order (GEMM blocking, the vocabulary-parallel
//   loss's sums, reductions over ranks). Gradients (one SGD step at lr 1000, so w0 - w1 =
//   1000 g holds g to an fp32 ulp of 1000 g) within 1e-5 in relative L2 distance per
//   tensor, measured 2.0e-6; grad_norm within 2e-6 of transformers' float64 sum, measured
//   4.4e-7.
// - bf16 (mixed<bf16>: compute weights are the master's bf16 rounding, each gradient is
//   rounded to bf16 before it is summed over data-parallel ranks) against the fixture's
//   emulation of exactly that at one process (make_qwen2_fixture.py's train_bf16). With
//   one data-parallel rank the roundings are the same ones: what is left is an element
//   whose fp32 gradient lands on the other side of a bf16 rounding boundary (one bf16 ulp,
//   2^-8, on a few elements): gradients 1e-3, measured 1.4e-4; grad_norm 1e-4, measured
//   1.5e-5; losses 5e-5, measured 7e-6. With dp ranks each rank's share is rounded and
//   the shares are summed in bf16 (a few more roundings of up to 2^-9 = 2.0e-3 relative,
//   RMS 2^-9 / sqrt 3 = 1.1e-3 each, on partial sums that may cancel), and the AdamW
//   steps that follow drift apart by that: gradients and grad_norm 1e-2, measured 3.5e-3
//   and 3.1e-3; only the first step's loss (the forward on the same rounded weights) is
//   held at 5e-5.
// Every bound is inside what a scale error gives: a whole gradient x2 (a sum over tp 2)
// or x1/2, x1/4 (a mean over dp taken twice) moves every gradient by 1 and the norm by
// 0.5 or more; the tp-replicated norms' gradients alone summed over tp 2 move grad_norm
// by 3.3e-2 and those tensors' gradients by 1. bf16 itself is 0.6-2.8 % per tensor from
// fp32's gradients, so the one-process bf16 bounds also tell a run that did not round
// its weights.
constexpr double norm_tol_fp32 = 2e-6, grad_tol_fp32 = 1e-5;
struct bf16_bounds {
  double norm, grad;
};
constexpr bf16_bounds bf16_one_dp_rank{1e-4, 1e-3}, bf16_dp_ranks{1e-2, 1e-2};
constexpr double loss_tol_bf16 = 5e-5;
bf16_bounds bf16_tol(const grid<world_comm>& g) { return g.dp_size() == 1 ? bf16_one_dp_rank : bf16_dp_ranks; }

// make_qwen2_fixture.py's GRAD_TENSORS: a tied vocabulary-parallel embedding, a
// column-parallel weight and bias, a row-parallel weight, two tp-replicated norms.
const std::vector<std::string> grad_tensors = {
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.k_proj.bias",
    "model.layers.1.self_attn.o_proj.weight",
    "model.layers.1.post_attention_layernorm.weight",
    "model.norm.weight",
};
constexpr float sgd_lr = 1000.0f;

template <class P>
constexpr bool is_bf16 = !std::is_same_v<P, fp32>;

// Each step's grad_norm against transformers' (the fixture's fp32 or bf16 run, masked or
// not), within tol relative; returns the worst relative difference.
double check_grad_norms(const std::vector<double>& got, const std::string& fixture_name, double tol) {
  const auto want = data().file.read_all<double>(fixture_name);
  REQUIRE(want.size() == static_cast<std::size_t>(steps));
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  for (std::size_t s = 0; s < want.size(); ++s) {
    const double e = std::abs(got[s] - want[s]) / want[s];
    INFO("step " << s + 1 << ": grad_norm " << got[s] << " vs transformers' " << want[s] << " (" << fixture_name
                 << "), relative " << e);
    CHECK(e <= tol);
    worst = std::max(worst, e);
  }
  return worst;
}

// One SGD step (no momentum, no decay) from the fixture's weights at lr sgd_lr: the
// gradient is (w0 - w1) / lr, scale and all. The grad_norm of the step too.
struct sgd_result {
  double grad_norm = 0;
  bf16_bounds tol16{};                                            // the layout's bf16 bounds
  std::vector<std::pair<std::string, std::vector<float>>> grads;  // grad_tensors' only
};

template <class S, class P = fp32>
sgd_result sgd_step(grid<world_comm>& g, const models::qwen2_config& cfg) {
  trainer_options o = options();
  o.schedule = lr_schedule::constant(sgd_lr);
  qwen2_trainer<S, sgd, P> tr(g, models::make_qwen2(cfg, g.tp_rank(), g.tp_size()), o);
  models::load_qwen2_weights(tr, fixture_dir);
  const auto w0 = by_name(tr.layout(), tr.model(), tr.gather_master());
  sgd_result r;
  r.tol16 = bf16_tol(g);
  r.grad_norm = tr.step(data().rows_of(g.dp_rank(), g.dp_size())).grad_norm;
  const auto w1 = by_name(tr.layout(), tr.model(), tr.gather_master());
  REQUIRE(w0.size() == w1.size());
  for (std::size_t t = 0; t < w0.size(); ++t) {
    if (std::find(grad_tensors.begin(), grad_tensors.end(), w0[t].first) == grad_tensors.end()) continue;
    const auto& a = w0[t].second;
    const auto& b = w1[t].second;
    REQUIRE(a.size() == b.size());
    std::vector<float> grad(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      grad[i] = static_cast<float>((static_cast<double>(a[i]) - b[i]) / sgd_lr);
    r.grads.emplace_back(w0[t].first, std::move(grad));
  }
  return r;
}

// An SGD step's gradients and grad_norm against transformers' first-step ones; returns
// the worst relative distance of a tensor.
template <class P>
double check_sgd(const sgd_result& r) {
  const std::string prefix = is_bf16<P> ? "bf16_grad." : "grad.";
  const double tol = is_bf16<P> ? r.tol16.grad : grad_tol_fp32;
  const double want_norm = data().file.read_all<double>(is_bf16<P> ? "bf16_step_grad_norm" : "step_grad_norm")[0];
  INFO("SGD step's grad_norm " << r.grad_norm << " vs transformers' " << want_norm);
  CHECK(std::abs(r.grad_norm - want_norm) <= (is_bf16<P> ? r.tol16.norm : norm_tol_fp32) * want_norm);
  REQUIRE(r.grads.size() == grad_tensors.size());
  double worst = 0.0;
  for (const auto& [name, got] : r.grads) {
    const auto want = data().file.read_all<float>(prefix + name);
    REQUIRE(got.size() == want.size());
    const double d = test::relative_distance(got, want);
    INFO(prefix << name << ": relative distance " << d << " from transformers' gradient");
    CHECK(d <= tol);
    worst = std::max(worst, d);
  }
  return worst;
}

// One grid over the first tp * dp * pp ranks (the others get none).
struct sub_grid {
  world_comm comm;
  std::optional<grid<world_comm>> g;
  sub_grid(world_comm& w, int tp, int dp, int pp, int color_base = 0)
      : comm(w.split(w.rank() < tp * dp * pp ? color_base : color_base + 1, w.rank())) {
    if (w.rank() < tp * dp * pp) g.emplace(comm, grid_dims{.tensor = tp, .pipeline = pp});
  }
};

}  // namespace

TEST_CASE("qwen2 config: transformers 5.x's file, and the keys that are refused") {
  const auto cfg = models::qwen2_config::load(fixture_dir);
  CHECK(cfg.vocab_size == 64);
  CHECK(cfg.num_key_value_heads == 2);
  CHECK(cfg.rope_theta == 10000.0);  // from rope_parameters (5.x)
  CHECK(cfg.tie_word_embeddings);
  // 4.x's top-level rope_theta, and the features this implementation does not have.
  auto j = cfg.to_json();
  j["rope_theta"] = 1e6;
  CHECK(models::qwen2_config::from_json(j, "x").rope_theta == 1e6);
  const auto refused = [&](const char* key, nlohmann::json v, const char* says) {
    auto bad = cfg.to_json();
    bad[key] = v;
    CHECK_THROWS_WITH(models::qwen2_config::from_json(bad, "dir/config.json"), strata_test::contains_text(says));
  };
  refused("model_type", "llama", "model_type is \"llama\"");
  refused("use_sliding_window", true, "use_sliding_window is true");
  refused("hidden_act", "gelu", "hidden_act is \"gelu\"");
  refused("rope_scaling", {{"rope_type", "yarn"}}, "rope_scaling of type \"yarn\"");
  refused("num_key_value_heads", 3, "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  refused("vocab_size", "64", "vocab_size must be");
  CHECK_THROWS_WITH(models::qwen2_config::load(fixture_dir / "nothing"), strata_test::contains_text("cannot open"));
  // A layout the sizes do not fit: the file and the key named.
  CHECK_THROWS_WITH(models::make_qwen2(cfg, 0, 3),
                    strata_test::contains_text("qwen2_tiny/config.json: num_key_value_heads 2 does not divide over 3"));
  auto odd = cfg;
  odd.vocab_size = 63;
  CHECK_THROWS_WITH(models::make_qwen2(odd, 0, 2),
                    strata_test::contains_text("config.json: vocab_size 63 does not divide over 2"));
}

TEST_CASE("qwen2 from transformers' files: logits, loss, grad norms, gradients, and the weights after 3 AdamW steps") {
  environment env;
  auto& w = env.world();
  if (w.size() != 1) return;
  grid g(w);
  const auto cfg = models::qwen2_config::load(fixture_dir);
  loaded_qwen2<replicated> tr(g, cfg);
  const batch<> b = data().rows_of(0, 1);

  // Logits: the model's layers on the loaded weights (replicated: every param is bound).
  context<host> ctx;
  qwen2& m = tr.model();
  nn::vocab_parallel_embedding::cache<> ce;
  nn::rms_norm::cache<> cn;
  tensor<float> x, y, logits;
  m.embed_tokens.forward(ctx, b.inputs, x, ce);
  std::vector<models::qwen2_decoder_layer::cache<host>> lc(m.layers.size());
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    m.layers[l].forward(ctx, x, y, lc[l]);
    std::swap(x, y);
  }
  m.norm.forward(ctx, x, y, cn);
  m.lm_head.logits(ctx, y, logits);
  const auto want = data().file.read_all<float>("logits");
  const double logit_err = max_abs_diff(std::vector<float>(logits.span().begin(), logits.span().end()), want);
  INFO("max |logit - transformers'| = " << logit_err);
  CHECK(logit_err <= 1e-4);

  const float loss = tr.evaluate(b);
  const float want_loss = data().file.read_all<float>("loss")[0];
  INFO("loss " << loss << " vs transformers' " << want_loss);
  CHECK(std::abs(loss - want_loss) <= 1e-5 * want_loss);

  const auto step_loss = data().file.read_all<float>("step_loss");
  REQUIRE(step_loss.size() == static_cast<std::size_t>(steps));
  std::vector<double> norms;
  for (int s = 0; s < steps; ++s) {
    const step_stats st = tr.step(b);
    norms.push_back(st.grad_norm);
    INFO("step " << s << ": loss " << st.loss << " vs " << step_loss[s]);
    CHECK(std::abs(st.loss - step_loss[s]) <= 1e-5 * step_loss[s]);
  }
  const double norm_err = check_grad_norms(norms, "step_grad_norm", norm_tol_fp32);
  const auto after = by_name(tr.layout(), m, tr.gather_master());
  REQUIRE(after.size() == hf_weights::open(fixture_dir).names().size());  // 2 + 12 a layer
  double worst = 0.0;
  for (const auto& [name, values] : after) {
    const double e = max_abs_diff(values, data().after(name));
    INFO(name << ": max |strata - transformers| after " << steps << " steps = " << e);
    CHECK(e <= 1e-4);
    worst = std::max(worst, e);
  }
  const double grad_err = check_sgd<fp32>(sgd_step<replicated>(g, cfg));

  // bf16: losses and grad norms of the fixture's emulation of mixed<bf16>, and its gradients.
  const run_result r16 = train<replicated, mixed<bf16>>(g, cfg);
  const auto bf16_loss = data().file.read_all<float>("bf16_step_loss");
  REQUIRE(bf16_loss.size() == r16.losses.size());
  for (std::size_t s = 0; s < bf16_loss.size(); ++s) {
    INFO("bf16 step " << s << ": loss " << r16.losses[s] << " vs " << bf16_loss[s]);
    CHECK(std::abs(r16.losses[s] - bf16_loss[s]) <= loss_tol_bf16 * bf16_loss[s]);
  }
  const double norm_err16 = check_grad_norms(r16.grad_norms, "bf16_step_grad_norm", bf16_one_dp_rank.norm);
  const double grad_err16 = check_sgd<mixed<bf16>>(sgd_step<replicated, mixed<bf16>>(g, cfg));
  std::printf(
      "qwen2_tiny vs transformers: logits %.3g, loss %.3g relative, weights after %d steps %.3g; grad norms %.3g "
      "relative, gradients %.3g; bf16 grad norms %.3g, gradients %.3g\n",
      logit_err, std::abs(loss - want_loss) / want_loss, steps, worst, norm_err, grad_err, norm_err16, grad_err16);
}

TEST_CASE("qwen2 export: a Hugging Face directory with the fixture's tensors, whole or in BF16 shards") {
  environment env;
  auto& w = env.world();
  if (w.size() != 1) return;
  grid g(w);
  const auto cfg = models::qwen2_config::load(fixture_dir);
  loaded_qwen2<replicated> tr(g, cfg);
  test::shared_dir out(w, "qwen2_export");
  models::export_qwen2(tr, out.path / "f32", cfg);
  const auto src = hf_weights::open(fixture_dir), back = hf_weights::open(out.path / "f32");
  CHECK(back.names() == src.names());  // no lm_head.weight: tied, as transformers saves it
  for (const auto& name : src.names()) {
    std::vector<float> a(src.info(name).numel()), b(back.info(name).numel());
    src.read(name, 0, a);
    back.read(name, 0, b);
    CHECK(a == b);
  }
  CHECK(models::qwen2_config::load(out.path / "f32").to_json() == cfg.to_json());

  // BF16 in shards of at most 20 KB: several files and the index that lists them.
  models::export_qwen2(tr, out.path / "bf16", cfg, dtype::bf16, 20000);
  CHECK(fs::exists(out.path / "bf16" / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(out.path / "bf16" / "model.safetensors"));
  const auto sharded = hf_weights::open(out.path / "bf16");
  CHECK(sharded.names() == src.names());
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  CHECK(sharded.info(name).dtype == dtype::bf16);
  std::vector<float> a(src.info(name).numel()), b(a.size());
  src.read(name, 0, a);
  sharded.read(name, 0, b);
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == static_cast<float>(bf16(a[i])));
  // The sharded directory loads back into a trainer, and every tensor the trainer holds is
  // the bf16 rounding of the fixture's. Mutation that fails here and nowhere else in this
  // file: in models/qwen2_io.hpp's load_qwen2_weights, read only F32 tensors
  // (`if (files.info(qwen2_hf_name(p.name)).dtype == dtype::f32) files.read(...)`): the
  // load "works" and leaves the initial weights.
  qwen2_trainer<replicated> tr2(g, models::make_qwen2(cfg), options());
  models::load_qwen2_weights(tr2, out.path / "bf16");
  const auto loaded = by_name(tr2.layout(), tr2.model(), tr2.gather_master());
  REQUIRE(loaded.size() == src.names().size());
  for (const auto& [tensor, values] : loaded) {
    std::vector<float> want(src.info(tensor).numel());
    src.read(tensor, 0, want);
    REQUIRE(values.size() == want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += values[i] != static_cast<float>(bf16(want[i]));
    INFO(tensor << ": " << differ << " of " << want.size() << " loaded values are not the exported bf16 ones");
    CHECK(differ == 0);
  }
}

TEST_CASE("qwen2 directories that do not fit are refused, naming the file and the tensor") {
  environment env;
  auto& w = env.world();
  if (w.size() != 1) return;
  grid g(w);
  const auto cfg = models::qwen2_config::load(fixture_dir);
  test::shared_dir out(w, "qwen2_bad");
  loaded_qwen2<replicated> tr(g, cfg);
  models::export_qwen2(tr, out.path / "good", cfg, dtype::f32, 20000);
  const auto refused = [&](const fs::path& dir, const std::string& says) {
    qwen2_trainer<replicated> t(g, models::make_qwen2(cfg), options());
    CHECK_THROWS_WITH(models::load_qwen2_weights(t, dir), strata_test::contains_text(says));
  };
  // A shard the index lists, missing.
  fs::copy(out.path / "good", out.path / "missing", fs::copy_options::recursive);
  fs::remove(out.path / "missing" / "model-00002-of-00004.safetensors");
  refused(out.path / "missing", "model-00002-of-00004.safetensors: listed in");
  // A truncated shard.
  fs::copy(out.path / "good", out.path / "short", fs::copy_options::recursive);
  const auto shard = out.path / "short" / "model-00003-of-00004.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  refused(out.path / "short", "model-00003-of-00004.safetensors");
  // Another model's sizes: a mis-shaped tensor.
  auto bigger = cfg;
  bigger.intermediate_size = 64;
  qwen2_trainer<replicated> tb(g, models::make_qwen2(bigger), options());
  CHECK_THROWS_WITH(models::load_qwen2_weights(tb, fixture_dir),
                    strata_test::contains_text("tensor \"model.layers.0.mlp.gate_proj.weight\" has shape [48, 32]"));
  // A model with fewer layers: the file has tensors it cannot place.
  auto fewer = cfg;
  fewer.num_hidden_layers = 1;
  qwen2_trainer<replicated> tf(g, models::make_qwen2(fewer), options());
  CHECK_THROWS_WITH(
      models::load_qwen2_weights(tf, fixture_dir),
      strata_test::contains_text("\"model.layers.1.input_layernorm.weight\" is not a param of this Qwen2 model"));
  // No weights at all.
  fs::create_directories(out.path / "empty");
  refused(out.path / "empty", "no model.safetensors and no model.safetensors.index.json");
}

TEST_CASE("qwen2 at tp 2 x dp 2, pp 2 x dp 2 and dp 4 with ZeRO 0-3 (+ offload) trains as one process does") {
  environment env;
  auto& w = env.world();
  if (w.size() != 4) return;
  const auto cfg = models::qwen2_config::load(fixture_dir);
  // The one-process run, on every rank alone.
  world_comm alone = w.split(w.rank(), 0);
  grid one(alone);
  const run_result ref = train<replicated>(one, cfg);
  REQUIRE(ref.losses.size() == static_cast<std::size_t>(steps));
  const auto close_to_ref = [&](const run_result& r, const char* what) {
    INFO(what);
    REQUIRE(r.losses.size() == ref.losses.size());
    for (int s = 0; s < steps; ++s) CHECK(std::abs(r.losses[s] - ref.losses[s]) <= 1e-5 * ref.losses[s]);
    const double e = max_abs_diff(r.master, ref.master);
    double loss_e = 0.0;
    for (int s = 0; s < steps; ++s)
      loss_e = std::max(loss_e, std::abs(double(r.losses[s]) - ref.losses[s]) / ref.losses[s]);
    INFO("max |weights - one process| = " << e);
    CHECK(e <= 1e-5);
    // The scale the weights cannot show: each step's grad_norm is transformers'.
    const double norm_e = check_grad_norms(r.grad_norms, "step_grad_norm", norm_tol_fp32);
    if (w.rank() == 0)
      std::printf(
          "qwen2_tiny %s vs one process: weights %.3g, losses %.3g relative; vs transformers: grad norms %.3g\n", what,
          e, loss_e, norm_e);
  };
  // At a layout, beside its fp32 AdamW run: an fp32 and a bf16 SGD step (transformers'
  // gradients, scale and all) and a bf16 AdamW run (transformers' bf16 losses and norms).
  const auto gradients_of = [&]<class S>(grid<world_comm>& g, type_tag<S>, const char* what) {
    INFO(what);
    const double e32 = check_sgd<fp32>(sgd_step<S>(g, cfg));
    const double e16 = check_sgd<mixed<bf16>>(sgd_step<S, mixed<bf16>>(g, cfg));
    const run_result r16 = train<S, mixed<bf16>>(g, cfg);
    const auto bf16_loss = data().file.read_all<float>("bf16_step_loss");
    REQUIRE(r16.losses.size() == bf16_loss.size());
    // The first step's forward runs on the same rounded weights at any layout; later
    // ones on weights that dp's roundings moved (the grad norms' bound holds them).
    const std::size_t held = g.dp_size() == 1 ? bf16_loss.size() : 1;
    for (std::size_t s = 0; s < held; ++s)
      CHECK(std::abs(r16.losses[s] - bf16_loss[s]) <= loss_tol_bf16 * bf16_loss[s]);
    const double n16 = check_grad_norms(r16.grad_norms, "bf16_step_grad_norm", bf16_tol(g).norm);
    if (w.rank() == 0)
      std::printf("qwen2_tiny %s vs transformers: gradients %.3g; bf16 gradients %.3g, grad norms %.3g\n", what, e32,
                  e16, n16);
  };
  {
    grid g(w, grid_dims{.tensor = 2});
    close_to_ref(train<zero<1>>(g, cfg), "tp 2 x dp 2, ZeRO-1");
    gradients_of(g, type_tag<zero<1>>{}, "tp 2 x dp 2, ZeRO-1");
  }
  {
    // tp 2 x pp 2 reproduces transformers' loss.
    grid g(w, grid_dims{.tensor = 2, .pipeline = 2});
    const run_result r = train<replicated>(g, cfg);
    close_to_ref(r, "tp 2 x pp 2");
    const float want = data().file.read_all<float>("loss")[0];
    CHECK(std::abs(r.losses[0] - want) <= 1e-5 * want);
    gradients_of(g, type_tag<replicated>{}, "tp 2 x pp 2");
  }
  {
    grid g(w, grid_dims{.pipeline = 2});
    close_to_ref(train<zero<2>>(g, cfg), "pp 2 x dp 2, ZeRO-2 (embedding and tied head on different stages)");
    gradients_of(g, type_tag<zero<2>>{}, "pp 2 x dp 2, ZeRO-2");
  }
  grid g(w);
  const run_result z3 = train<zero<3>>(g, cfg);
  close_to_ref(z3, "dp 4, ZeRO-3");
  gradients_of(g, type_tag<zero<3, offload_optimizer>>{}, "dp 4, ZeRO-3 + offload");
  // Every stage the same bits, offload too (DESIGN §4), tied weights included.
  CHECK(weights_hash(train<replicated>(g, cfg).master) == weights_hash(z3.master));
  CHECK(weights_hash(train<zero<1>>(g, cfg).master) == weights_hash(z3.master));
  CHECK(weights_hash(train<zero<2>>(g, cfg).master) == weights_hash(z3.master));
  CHECK(weights_hash(train<zero<3, offload_optimizer>>(g, cfg).master) == weights_hash(z3.master));
}

TEST_CASE("tied copies stay one tensor: equal bits after training, at every layout") {
  environment env;
  auto& w = env.world();
  const auto cfg = models::qwen2_config::load(fixture_dir);
  const auto check = [&](grid<world_comm>& g, auto sharding, const char* what) {
    using S = typename decltype(sharding)::type;
    INFO(what);
    loaded_qwen2<S> tr(g, cfg);
    const batch<> b = data().rows_of(g.dp_rank(), g.dp_size());
    for (int s = 0; s < steps; ++s) tr.step(b);
    const auto named = tr.gather_master();
    // gather_master has both copies: embed_tokens.weight first, lm_head.weight after the norm.
    const std::size_t n = static_cast<std::size_t>(cfg.vocab_size) * cfg.hidden_size;
    const std::vector<float> embed(named.begin(), named.begin() + static_cast<long>(n));
    const std::vector<float> head(named.end() - static_cast<long>(n), named.end());
    CHECK(weights_hash(embed) == weights_hash(head));
    // On one stage the copy has no master of its own (nor moments: the same count), so
    // the one tensor is counted once, at every stage (ZeRO-0's whole master included).
    if (g.pp_size() == 1) {
      std::size_t all = 0, copy = 0;
      for (const auto& p : tr.layout().params()) {
        all += p.numel;
        if (!p.tied_to.empty()) copy += p.numel;
      }
      const std::size_t dp = S::stage > 0 ? static_cast<std::size_t>(g.dp_size()) : 1;
      const std::size_t master = tr.memory().bytes.at("master") / sizeof(float) * dp;
      CHECK(copy > 0);
      CHECK(master >= all - copy);
      CHECK(master <= all - copy + tr.plan().buckets().size() * static_cast<std::size_t>(g.dp_size()) * 16);  // padding
      CHECK(tr.memory().bytes.at("optimizer_states") == 2 * tr.memory().bytes.at("master"));
    }
  };
  if (w.size() == 1) {
    grid g(w);
    check(g, type_tag<replicated>{}, "one process");
    check(g, type_tag<zero<1>>{}, "one process, ZeRO-1");
  } else {
    grid pp(w, grid_dims{.pipeline = 2});
    check(pp, type_tag<zero<3>>{}, "pp 2 x dp 2, ZeRO-3");
    grid tp(w, grid_dims{.tensor = 2});
    check(tp, type_tag<zero<2>>{}, "tp 2 x dp 2, ZeRO-2");
    grid dp(w);
    check(dp, type_tag<zero<3>>{}, "dp 4, ZeRO-3");
    check(dp, type_tag<replicated>{}, "dp 4, ZeRO-0");
  }
}

TEST_CASE("masked labels: transformers' ignore_index mean over the step's labels, at every layout") {
  environment env;
  auto& w = env.world();
  const auto cfg = models::qwen2_config::load(fixture_dir);
  const auto want_loss = data().file.read_all<float>("masked_step_loss");
  REQUIRE(want_loss.size() == static_cast<std::size_t>(steps));
  // The names of the gathered master's tensors, from a one-process trainer.
  world_comm alone = w.split(w.rank(), 0);
  grid one(alone);
  qwen2_trainer<replicated> names(one, models::make_qwen2(cfg), options());
  // The masks are uneven over rows (row 1 keeps 2 of 16 labels): a mean per rank or per
  // micro-batch would weigh row 1's labels 7x and miss transformers' numbers.
  const auto check = [&](grid_dims dims, auto sharding, const char* what) {
    using S = typename decltype(sharding)::type;
    INFO(what);
    grid g(w, dims);
    const run_result r = train<S>(g, cfg, true);
    REQUIRE(r.losses.size() == want_loss.size());
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s << ": loss " << r.losses[s] << " vs transformers' " << want_loss[s]);
      CHECK(std::abs(r.losses[s] - want_loss[s]) <= 1e-5 * want_loss[s]);
    }
    double worst = 0.0;
    const auto after = by_name(names.layout(), names.model(), r.master);
    REQUIRE(after.size() == hf_weights::open(fixture_dir).names().size());
    for (const auto& [name, values] : after) {
      const double e = max_abs_diff(values, data().after(name, true));
      INFO(name << ": max |strata - transformers| = " << e);
      CHECK(e <= 1e-4);
      worst = std::max(worst, e);
    }
    // The mean's denominator is the step's labels over every rank: a per-rank count
    // would change the gradient's scale, which grad_norm shows and the weights do not.
    const double norm_e = check_grad_norms(r.grad_norms, "masked_step_grad_norm", norm_tol_fp32);
    const double norm_e16 = check_grad_norms(train<S, mixed<bf16>>(g, cfg, true).grad_norms,
                                             "masked_bf16_step_grad_norm", bf16_tol(g).norm);
    if (w.rank() == 0)
      std::printf("qwen2_tiny masked, %s vs transformers: weights %.3g, grad norms %.3g, bf16 grad norms %.3g\n", what,
                  worst, norm_e, norm_e16);
  };
  if (w.size() == 1) {
    check(grid_dims{}, type_tag<replicated>{}, "one process");
  } else {
    check(grid_dims{}, type_tag<zero<3>>{}, "dp 4, ZeRO-3");
    check(grid_dims{.tensor = 2}, type_tag<zero<1>>{}, "tp 2 x dp 2, ZeRO-1");
    check(grid_dims{.pipeline = 2}, type_tag<replicated>{}, "pp 2 x dp 2");
  }
}

TEST_CASE("recomputed decoder layers: the same bits with one layer's activations, at every layout") {
  environment env;
  auto& w = env.world();
  const auto cfg = models::qwen2_config::load(fixture_dir);
  const auto check = [&](grid_dims dims, auto sharding, int micro_batches, const char* what) {
    using S = typename decltype(sharding)::type;
    INFO(what);
    grid g(w, dims);
    trainer_options o = options();
    o.micro_batches = micro_batches;
    const run_result kept = train<S>(g, cfg, true, o);
    o.recompute = {"layers"};
    const run_result again = train<S>(g, cfg, true, o);
    // Forward is deterministic, so running it again gives the caches it gave the first time.
    for (int s = 0; s < steps; ++s) CHECK(again.losses[s] == kept.losses[s]);
    CHECK(weights_hash(again.master) == weights_hash(kept.master));
    // The caches of the decoder layers in flight become one scratch cache (and one output
    // made again). The last of two stages runs one micro-batch at a time through its one
    // decoder layer: there the scratch saves nothing.
    INFO("activations: " << kept.activation_bytes << " kept, " << again.activation_bytes << " recomputed");
    if (g.pp_rank() == 0) CHECK(again.activation_bytes < kept.activation_bytes);
  };
  if (w.size() == 1) {
    check(grid_dims{}, type_tag<replicated>{}, 1, "one process");
    check(grid_dims{}, type_tag<replicated>{}, 2, "one process, 2 micro-batches");
    grid g(w);
    trainer_options o = options();
    o.recompute = {"blocks"};
    CHECK_THROWS_WITH(loaded_qwen2<replicated>(g, cfg, o),
                      strata_test::contains_text("recompute names \"blocks\", which is no layer of the model") &&
                          strata_test::contains_text("layers.0, layers.1"));
    o.recompute = {"lm_head"};
    CHECK_THROWS_WITH(loaded_qwen2<replicated>(g, cfg, o),
                      strata_test::contains_text("recompute names the model's last layer lm_head"));
  } else {
    check(grid_dims{}, type_tag<zero<3>>{}, 1, "dp 4, ZeRO-3");
    check(grid_dims{.tensor = 2}, type_tag<zero<2>>{}, 1, "tp 2 x dp 2, ZeRO-2");
    check(grid_dims{.pipeline = 2}, type_tag<zero<1>>{}, 2, "pp 2 x dp 2, 1F1B over 2 micro-batches");
  }
}
