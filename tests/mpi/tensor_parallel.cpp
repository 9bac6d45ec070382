// strata-ranks: 2 4
// Tensor-parallel layers at T ranks against the same layers whole (T = 1) on every rank,
// from the same full weights: outputs, input gradients and the local slices of the param
// gradients agree, with the collectives each layer should need; so does the whole gpt
// model; sizes that do not divide are refused.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <strata/comm/detail/comm_registry.hpp>
#include <strata/comm/environment.hpp>
#include <strata/model/reflect.hpp>
#include <strata/nn/attention.hpp>
#include <strata/nn/grouped_query_attention.hpp>
#include <strata/nn/softmax_cross_entropy.hpp>
#include <strata/nn/swiglu.hpp>
#include <strata/nn/tp/all.hpp>
#include <strata/train/init.hpp>
#include <strata/train/layer_table.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "../../examples/gpt/model.hpp"
#include "catch.hpp"

using namespace strata;
namespace sp = strata::nn;

// Portable across Catch2 v2 and v3, with the whole text in the failure message.
#define CHECK_CONTAINS(text, part)                \
  do {                                            \
    const std::string text_ = (text);             \
    INFO(text_);                                  \
    CHECK(text_.find(part) != std::string::npos); \
  } while (0)

namespace {

// A trainer-like context: the tensor communicator and the micro-batch's targets.
struct tp_ctx {
  using space_type = host;
  world_comm* comm;
  tensor<float> t;
  world_comm& tp() { return *comm; }
  const tensor<float>& targets() const { return t; }
};

// Tensor groups of T consecutive ranks (Megatron's layout) and each rank on its own.
struct groups {
  world_comm tp, self;
  groups(world_comm& world, int T)
      : tp(world.split(world.rank() / T, world.rank())), self(world.split(world.rank(), 0)) {}
};

// Params with storage owned here: element i of a param is a function of its name and of
// its index in the full tensor, as the trainer initialises them, so a slice at T ranks
// holds exactly the values of the whole param at T = 1.
struct param_store {
  std::deque<std::vector<float>> blocks;
  template <class Aggregate>
  std::vector<param<float>*> bind(Aggregate& a, bool own_init = false) {
    std::vector<param<float>*> ps;
    for_each_param(a, [&](param<float>& p, std::string_view name) {
      p.name.assign(name);
      auto& d = blocks.emplace_back(p.numel());
      auto& g = blocks.emplace_back(p.numel(), 0.0f);
      // Uniform +-0.5 for everything unless asked: biases and norms non-trivial too.
      const init_spec spec = own_init ? p.init : init_spec::uniform(0.5f);
      const auto key = detail::init_key(2024, name);
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = detail::init_value(spec, key, p.global_index(i));
      p.data_ptr = d.empty() ? nullptr : d.data();
      p.grad_ptr = g.empty() ? nullptr : g.data();
      ps.push_back(&p);
    });
    return ps;
  }
};

tensor<float> copy_of(const tensor<float>& t) {
  tensor<float> c(t.shape());
  std::copy_n(t.data(), t.numel(), c.data());
  return c;
}

tensor<float> random_tensor(const shape& s, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  tensor<float> t(s);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& v : t.span()) v = u(rng);
  return t;
}

// Columns [k cols, (k+1) cols) of the last dimension of t.
tensor<float> column_block(const tensor<float>& t, int k, std::int64_t cols) {
  const std::int64_t width = t.dim(t.shape().rank - 1), rows = static_cast<std::int64_t>(t.numel()) / width;
  shape s = t.shape();
  s[s.rank - 1] = cols;
  tensor<float> out(s);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) out[r * cols + j] = t[r * width + k * cols + j];
  return out;
}

// The T-rank computation sums the same products as the whole one, grouped by rank: each
// value differs by float rounding of sums of length <= 64, a few 1e-7 of the largest
// magnitude involved. 1e-5 of the tensor's largest element leaves room for that and is
// far below the error of a missing slice, rank offset or reduction (order 1e-1).
constexpr double tol = 1e-5;

template <class A, class B>
void check_close(const A& got, const B& want, std::string_view what) {
  REQUIRE(got.size() == want.size());
  double scale = 0.0, worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (e > worst) worst = e, at = i;
  }
  INFO(what << ": max |difference| " << worst << " at " << at << ", largest |value| " << scale);
  // STRATA_TEST_VERBOSE=1 prints how much of the tolerance each comparison used.
  if (std::getenv("STRATA_TEST_VERBOSE"))
    std::printf("%-28s max |diff| / max |value| = %.2e (tolerance %.0e)\n", std::string(what).c_str(),
                worst / std::max(scale, 1e-30), tol);
  CHECK(worst <= tol * std::max(scale, 1e-30));
}

void check_close(const tensor<float>& got, const tensor<float>& want, std::string_view what) {
  REQUIRE(got.shape() == want.shape());
  check_close(got.span(), want.span(), what);
}

// Each local param's gradient equals the whole param's gradient at the same full indices.
void check_grad_slices(const std::vector<param<float>*>& local, const std::vector<param<float>*>& full) {
  REQUIRE(local.size() == full.size());
  for (std::size_t k = 0; k < local.size(); ++k) {
    REQUIRE(local[k]->name == full[k]->name);
    REQUIRE((local[k]->sharded() ? local[k]->full_shape.numel() : local[k]->numel()) == full[k]->numel());
    std::vector<float> want(local[k]->numel());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = full[k]->grad()[local[k]->global_index(i)];
    check_close(local[k]->grads(), want, local[k]->name + " grad");
  }
}

struct setup {
  environment env;
  int T;
  groups g;
  tp_ctx tp, whole;
  std::mt19937 rng{99};  // the same stream on every rank: every rank draws the same data
  explicit setup(int t) : T(t), g(env.world(), t), tp{&g.tp, {}}, whole{&g.self, {}} {}
  int r() const { return g.tp.rank(); }
};

// The tensor-parallel sizes this world can run: the whole world, and 2 within it.
std::vector<int> tp_sizes() {
  environment env;
  std::vector<int> s{env.size()};
  if (env.size() > 2 && env.size() % 2 == 0) s.push_back(2);
  return s;
}

}  // namespace

TEST_CASE("column_parallel_linear matches a whole linear, with and without gathered output") {
  for (int T : tp_sizes())
    for (bool gather : {false, true}) {
      INFO("T = " << T << ", gather_output = " << gather);
      setup s(T);
      auto full = sp::make_column_parallel_linear(6, 8, 0, 1);
      auto part = sp::make_column_parallel_linear(6, 8, s.r(), T, true, gather);
      param_store store;
      const auto pf = store.bind(full), pp = store.bind(part);
      const auto x = random_tensor(shape{2, 3, 6}, s.rng);
      const auto dy = random_tensor(shape{2, 3, 8}, s.rng);
      const std::int64_t cols = 8 / T;
      sp::column_parallel_linear::cache cf, cp;
      tensor<float> yf, yp, dxf, dxp;
      full.forward(s.whole, x, yf, cf);
      part.forward(s.tp, x, yp, cp);
      check_close(yp, gather ? copy_of(yf) : column_block(yf, s.r(), cols), "y");
      full.backward(s.whole, dy, dxf, cf);
      const auto dy_part = gather ? copy_of(dy) : column_block(dy, s.r(), cols);
      part.backward(s.tp, dy_part, dxp, cp);
      check_close(dxp, dxf, "dx");  // all-reduced: the whole input gradient on every rank
      check_grad_slices(pp, pf);
    }
}

TEST_CASE("row_parallel_linear matches a whole linear; the bias is added once") {
  for (int T : tp_sizes()) {
    INFO("T = " << T);
    setup s(T);
    auto full = sp::make_row_parallel_linear(8, 5, 0, 1);
    auto part = sp::make_row_parallel_linear(8, 5, s.r(), T);
    param_store store;
    const auto pf = store.bind(full), pp = store.bind(part);
    const auto x = random_tensor(shape{3, 8}, s.rng);
    const auto dy = random_tensor(shape{3, 5}, s.rng);
    const std::int64_t cols = 8 / T;
    sp::row_parallel_linear::cache cf, cp;
    tensor<float> yf, yp, dxf, dxp;
    const auto x_part = column_block(x, s.r(), cols);
    full.forward(s.whole, x, yf, cf);
    part.forward(s.tp, x_part, yp, cp);
    check_close(yp, yf, "y");
    full.backward(s.whole, dy, dxf, cf);
    part.backward(s.tp, dy, dxp, cp);
    check_close(dxp, column_block(dxf, s.r(), cols), "dx");
    check_grad_slices(pp, pf);  // the bias is whole: its full gradient on every rank
  }
}

TEST_CASE("vocab_parallel_embedding matches a whole embedding") {
  for (int T : tp_sizes()) {
    INFO("T = " << T);
    setup s(T);
    auto full = sp::make_vocab_parallel_embedding(12, 5, 0, 1);
    auto part = sp::make_vocab_parallel_embedding(12, 5, s.r(), T);
    param_store store;
    const auto pf = store.bind(full), pp = store.bind(part);
    tensor<float> ids(shape{2, 7});
    std::uniform_int_distribution<int> tok(0, 11);
    for (auto& v : ids.span()) v = static_cast<float>(tok(s.rng));
    ids[0] = ids[1] = 0.0f;  // repeated ids, and both ends of the vocabulary
    ids[2] = 11.0f;
    const auto dy = random_tensor(shape{2, 7, 5}, s.rng);
    sp::vocab_parallel_embedding::cache cf, cp;
    tensor<float> yf, yp, dxf, dxp;
    full.forward(s.whole, ids, yf, cf);
    part.forward(s.tp, ids, yp, cp);
    check_close(yp, yf, "y");
    full.backward(s.whole, dy, dxf, cf);
    part.backward(s.tp, dy, dxp, cp);
    check_close(dxp, dxf, "dx (zeros)");
    check_grad_slices(pp, pf);
    tensor<float> bad(shape{1});
    bad[0] = 12.0f;
    CHECK_THROWS_AS(part.forward(s.tp, bad, yp, cp), error);
  }
}

TEST_CASE("vocab_parallel_cross_entropy matches softmax_cross_entropy on the whole logits") {
  for (int T : tp_sizes()) {
    INFO("T = " << T);
    setup s(T);
    const auto logits = random_tensor(shape{2, 3, 12}, s.rng, -4.0f, 4.0f);
    tensor<float> targets(shape{2, 3});
    std::uniform_int_distribution<int> cls(0, 11);
    for (auto& v : targets.span()) v = static_cast<float>(cls(s.rng));
    targets[0] = 0.0f;
    targets[1] = 11.0f;
    s.tp.t = copy_of(targets);
    s.whole.t = copy_of(targets);
    tensor<float> dy(shape{1});
    dy[0] = 0.75f;

    nn::softmax_cross_entropy plain;
    nn::softmax_cross_entropy::cache c0;
    tensor<float> y0, dx0;
    plain.forward(s.whole, logits, y0, c0);
    plain.backward(s.whole, dy, dx0, c0);

    auto whole = sp::make_vocab_parallel_cross_entropy(12, 0, 1);
    auto part = sp::make_vocab_parallel_cross_entropy(12, s.r(), T);
    sp::vocab_parallel_cross_entropy::cache cw, cp;
    tensor<float> yw, yp, dxw, dxp;
    whole.forward(s.whole, logits, yw, cw);
    whole.backward(s.whole, dy, dxw, cw);
    const std::int64_t cols = 12 / T;
    const auto local = column_block(logits, s.r(), cols);
    part.forward(s.tp, local, yp, cp);
    part.backward(s.tp, dy, dxp, cp);
    // At T = 1 the same arithmetic as softmax_cross_entropy.
    CHECK(yw[0] == y0[0]);
    check_close(dxw, dx0, "dx at T = 1");
    INFO("loss " << yp[0] << " vs " << y0[0]);
    CHECK(std::abs(yp[0] - y0[0]) <= tol * std::abs(y0[0]));
    check_close(dxp, column_block(dx0, s.r(), cols), "dx");
  }
}

TEST_CASE("linear_cross_entropy split by vocabulary matches the whole head and loss apart, in chunks") {
  for (int T : tp_sizes())
    for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{2 * 12}}) {
      INFO("T = " << T << ", chunk_elements " << chunk);
      setup s(T);
      // The same weight values at T = 1 and T: the store draws by name and full index.
      auto head = sp::make_column_parallel_linear(8, 24, 0, 1, false);
      auto fused = sp::make_linear_cross_entropy(8, 24, s.r(), T, chunk);
      param_store store;
      const auto pf = store.bind(head), pp = store.bind(fused);
      const auto x = random_tensor(shape{2, 5, 8}, s.rng, -2.0f, 2.0f);
      tensor<float> targets(shape{2, 5});
      std::uniform_int_distribution<int> cls(0, 23);
      for (auto& v : targets.span()) v = static_cast<float>(cls(s.rng));
      targets[3] = static_cast<float>(ignore_label);
      s.tp.t = copy_of(targets);
      s.whole.t = copy_of(targets);
      tensor<float> dy(shape{1});
      dy[0] = 0.75f;

      nn::softmax_cross_entropy ce;
      nn::softmax_cross_entropy::cache cc;
      sp::column_parallel_linear::cache ch;
      tensor<float> logits, y0, dlogits, dx0;
      head.forward(s.whole, x, logits, ch);
      ce.forward(s.whole, logits, y0, cc);
      ce.backward(s.whole, dy, dlogits, cc);
      head.backward(s.whole, dlogits, dx0, ch);

      sp::linear_cross_entropy::cache c;
      tensor<float> y, dx;
      fused.forward(s.tp, x, y, c);
      fused.backward(s.tp, dy, dx, c);
      INFO("loss " << y[0] << " vs " << y0[0]);
      CHECK(std::abs(y[0] - y0[0]) <= tol * std::abs(y0[0]));
      check_close(dx, dx0, "dx");      // all-reduced: the whole input gradient on every rank
      check_grad_slices(pp, {pf[0]});  // the head's weight (its bias is empty)
      tensor<float> part_logits;
      fused.logits(s.tp, x, part_logits);
      check_close(part_logits, column_block(logits, s.r(), 24 / T), "logits");
    }
}

TEST_CASE("causal_self_attention with heads split over ranks matches whole attention") {
  for (int T : tp_sizes()) {
    INFO("T = " << T);
    setup s(T);
    auto full = nn::make_causal_self_attention(16, 4, 0, 1);
    auto part = nn::make_causal_self_attention(16, 4, s.r(), T);
    param_store store;
    const auto pf = store.bind(full), pp = store.bind(part);
    const auto x = random_tensor(shape{2, 5, 16}, s.rng);
    const auto dy = random_tensor(shape{2, 5, 16}, s.rng);
    nn::causal_self_attention::cache cf, cp;
    tensor<float> yf, yp, dxf, dxp;
    full.forward(s.whole, x, yf, cf);
    part.forward(s.tp, x, yp, cp);
    check_close(yp, yf, "y");
    full.backward(s.whole, dy, dxf, cf);
    part.backward(s.tp, dy, dxp, cp);
    check_close(dxp, dxf, "dx");
    check_grad_slices(pp, pf);
  }
}

namespace {

// Collectives submitted so far on the tensor group c, as it reports them to the registry
// every communicator reports to (the hang diagnosis's record).
std::uint64_t collectives_on(world_comm& c, int first_world_rank) {
  std::vector<int> members(static_cast<std::size_t>(c.size()));
  for (int i = 0; i < c.size(); ++i) members[static_cast<std::size_t>(i)] = first_world_rank + i;
  for (const auto& h : detail::comm_registry::get().snapshot())
    if (h.name == c.name() && h.members == members) return h.collectives;
  FAIL("no history of communicator " << c.name());
  return 0;
}

// One layer at T ranks against the same layer whole: output, input gradient and gradient
// slices agree, and the tensor group runs one collective in forward (the row-parallel
// projection's sum) and one in backward (the column-parallel projections' input gradients
// summed before they are sent, not one all-reduce per projection).
template <class Layer>
void check_split_layer(setup& s, Layer full, Layer part, std::int64_t dim) {
  param_store store;
  const auto pf = store.bind(full), pp = store.bind(part);
  const auto x = random_tensor(shape{2, 5, dim}, s.rng);
  const auto dy = random_tensor(shape{2, 5, dim}, s.rng);
  typename Layer::template cache<> cf, cp;
  tensor<float> yf, yp, dxf, dxp;
  const int first = s.env.world().rank() / s.T * s.T;
  full.forward(s.whole, x, yf, cf);
  const auto before = collectives_on(s.g.tp, first);
  part.forward(s.tp, x, yp, cp);
  CHECK(collectives_on(s.g.tp, first) - before == 1);
  check_close(yp, yf, "y");
  full.backward(s.whole, dy, dxf, cf);
  part.backward(s.tp, dy, dxp, cp);
  CHECK(collectives_on(s.g.tp, first) - before == 2);
  check_close(dxp, dxf, "dx");
  check_grad_slices(pp, pf);
}

}  // namespace

TEST_CASE("grouped_query_attention and swiglu_mlp split over ranks match whole layers, one all-reduce each way") {
  for (int T : tp_sizes()) {
    INFO("T = " << T);
    setup s(T);
    // 8 query heads over 4 key/value heads of 4 features; 24 gated units.
    check_split_layer(s, nn::make_grouped_query_attention(32, 8, 4, 10000.0f),
                      nn::make_grouped_query_attention(32, 8, 4, 10000.0f, s.r(), T), 32);
    check_split_layer(s, nn::make_swiglu_mlp(32, 24), nn::make_swiglu_mlp(32, 24, s.r(), T), 32);
  }
}

namespace {

// One forward and backward of a gpt model through the trainer's layer table.
struct gpt_pass {
  gpt::model m;
  param_store store;
  std::vector<param<float>*> params;
  std::vector<detail::layer_entry<tp_ctx>> table;
  std::vector<tensor<float>> acts, dacts;

  gpt_pass(const gpt::config& cfg, int rank, int T) : m(gpt::make_model(cfg, rank, T)) {
    params = store.bind(m, /*own_init=*/true);
    table = detail::make_layer_table<tp_ctx>(m, 1);
    acts.resize(table.size() + 1);
    dacts.resize(table.size() + 1);
  }
  float run(tp_ctx& ctx, const batch<>& b) {
    ctx.t = copy_of(b.targets);
    acts[0] = copy_of(b.inputs);
    for (std::size_t l = 0; l < table.size(); ++l) table[l].run_forward(ctx, acts[l], acts[l + 1], 0);
    REQUIRE(acts.back().numel() == 1);
    dacts.back().resize(shape{1});
    dacts.back()[0] = 1.0f;
    for (std::size_t l = table.size(); l-- > 0;) table[l].run_backward(ctx, dacts[l + 1], dacts[l], 0);
    return acts.back()[0];
  }
};

}  // namespace

TEST_CASE("the gpt model at T ranks gives the loss and gradients of one process") {
  const gpt::config cfg{16, 8, 16, 4, 2};
  batch<> b;
  gpt::synthetic_tokens(cfg, 5).fill(0, 3, b);
  for (int T : tp_sizes()) {
    INFO("T = " << T);
    setup s(T);
    gpt_pass whole(cfg, 0, 1), part(cfg, s.r(), T);
    REQUIRE(part.table.size() == whole.table.size());
    const float lw = whole.run(s.whole, b), lp = part.run(s.tp, b);
    INFO("loss " << lp << " vs " << lw);
    // A fresh model predicts about uniformly: the loss is near log(vocab).
    CHECK(std::abs(lw - std::log(16.0)) < 0.1);
    CHECK(std::abs(lp - lw) <= tol * std::abs(lw));
    // Every trainable value, sliced or replicated, has the single-process gradient.
    check_grad_slices(part.params, whole.params);
    // Within a tensor group every rank computed the same loss.
    float lo = lp, hi = lp;
    s.g.tp.all_reduce(std::span<float>(&lo, 1), reduce_op::min);
    s.g.tp.all_reduce(std::span<float>(&hi, 1), reduce_op::max);
    CHECK(lo == hi);
    // Replicated params (norms, positions, row-parallel biases) see the same all-reduced
    // activations on every rank of the group, so their gradients are bitwise equal: a
    // trainer may take any rank's copy instead of reducing them over the group.
    for (auto* p : part.params) {
      if (p->sharded() || p->numel() == 0) continue;
      std::vector<float> all(p->numel() * T);
      s.g.tp.all_gather(std::span<const float>(p->grads()), std::span<float>(all));
      for (int k = 0; k < T; ++k) {
        INFO(p->name << " on tensor rank " << k);
        CHECK(std::memcmp(all.data() + k * p->numel(), p->grad(), p->numel() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("the synthetic token stream is deterministic, next-token shifted and learnable") {
  const gpt::config cfg{16, 8, 16, 4, 2};
  gpt::synthetic_tokens stream(cfg, 5);
  batch<> a, b;
  stream.fill(3, 4, a);
  stream.fill(0, 7, b);  // rows 3..6 again, as part of a larger request
  REQUIRE(a.inputs.shape() == (shape{4, 8}));
  REQUIRE(a.targets.shape() == (shape{4, 8}));
  for (std::size_t i = 0; i < a.inputs.numel(); ++i) {
    CHECK(a.inputs[i] == b.inputs[3 * 8 + i]);
    CHECK(a.targets[i] == b.targets[3 * 8 + i]);
  }
  for (std::int64_t r = 0; r < 4; ++r)
    for (std::int64_t t = 0; t + 1 < 8; ++t) CHECK(a.inputs[r * 8 + t + 1] == a.targets[r * 8 + t]);
  // Four successors per token: well below the log(16) = 2.77 of uniform guessing.
  CHECK(stream.entropy() > 0.5);
  CHECK(stream.entropy() < 1.1);
}

TEST_CASE("sizes that do not divide over the tensor ranks are config_errors naming the numbers") {
  const auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const config_error& e) {
      return e.what();
    }
    return "no config_error";
  };
  CHECK_CONTAINS(message([] { sp::make_column_parallel_linear(4, 10, 0, 4); }),
                 "column_parallel_linear: 10 output features do not divide over 4 tensor-parallel ranks");
  CHECK_CONTAINS(message([] { sp::make_row_parallel_linear(10, 4, 1, 4); }),
                 "row_parallel_linear: 10 input features do not divide over 4 tensor-parallel ranks");
  CHECK_CONTAINS(message([] { sp::make_vocab_parallel_embedding(10, 4, 0, 4); }),
                 "vocab_parallel_embedding: 10 vocabulary entries do not divide over 4 tensor-parallel ranks");
  CHECK_CONTAINS(message([] { sp::make_vocab_parallel_cross_entropy(10, 0, 4); }),
                 "vocab_parallel_cross_entropy: 10 vocabulary entries do not divide over 4");
  CHECK_CONTAINS(message([] { gpt::make_model(gpt::config{16, 8, 24, 6, 1}, 0, 4); }),
                 "attention: 6 heads do not divide over 4 tensor-parallel ranks");
  CHECK_CONTAINS(message([] { sp::make_column_parallel_linear(4, 8, 4, 4); }),
                 "tensor-parallel rank 4 is not in [0, 4)");

  // A layer built for one tensor size refuses a communicator of another.
  setup s(1);
  auto half = sp::make_column_parallel_linear(4, 8, 0, 2);
  param_store store;
  store.bind(half);
  sp::column_parallel_linear::cache c;
  tensor<float> x(shape{1, 4}), y;
  CHECK_CONTAINS(message([&] { half.forward(s.whole, x, y, c); }),
                 "built for 2 tensor-parallel ranks, but the context's tensor communicator has 1");
}
