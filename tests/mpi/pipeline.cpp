// strata-ranks: 4
// strata-gloo-ranks: 4
// Tensor x data x pipeline grids train the gpt model to the same losses and weights as
// one process; gpipe and 1F1B give bitwise identical weights; bad grids are refused.
#include "../../examples/gpt/model.hpp"
#include "catch.hpp"
#include "mlp_run.hpp"

using namespace strata;

namespace {

struct gpt_result {
  std::vector<float> master;
  std::vector<float> losses;
  double idle = 0;
  std::size_t activation_bytes = 0;
};

constexpr gpt::config small{32, 8, 16, 4, 2};  // vocab, seq, dim, heads, layers

template <class Sharding = replicated, class Schedule = one_f_one_b>
gpt_result run_gpt(grid<world_comm>& g, long steps = 10, int micro_batches = 4, long batch = 8) {
  trainer_options o;
  o.micro_batches = micro_batches;
  o.schedule = lr_schedule::constant(3e-3);
  o.bucket_elems = 3000;  // several buckets per stage
  o.seed = 5;
  trainer<gpt::model, host, Sharding, adamw, fp32, Schedule> tr(g, gpt::make_model(small, g.tp_rank(), g.tp_size()), o);
  gpt::synthetic_tokens data(small, 9);
  const long local = batch / g.dp_size();
  strata::batch<> b;
  gpt_result r;
  for (long s = 0; s < steps; ++s) {
    data.fill(static_cast<std::uint64_t>(s * batch + g.dp_rank() * local), local, b);
    const auto st = tr.step(b);
    r.losses.push_back(st.loss);
    r.idle += st.idle_seconds;
  }
  r.master = tr.gather_master();
  r.activation_bytes = tr.activation_bytes();
  return r;
}

// A grid over a size-1 communicator: the single-process reference, on every rank.
struct single_process {
  world_comm self;
  grid<world_comm> g;
  explicit single_process(world_comm& world) : self(world.split(world.rank(), 0)), g(self) {}
};

void check_close(const gpt_result& got, const gpt_result& want, const char* what) {
  INFO(what);
  REQUIRE(got.master.size() == want.master.size());
  const double d = test::relative_distance(got.master, want.master);
  INFO("relative distance of the weights " << d);
  CHECK(d < 1e-5);
  REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i)
    CHECK(std::abs(got.losses[i] - want.losses[i]) <= 1e-5f * std::abs(want.losses[i]));
}

}  // namespace

TEST_CASE("tensor, pipeline and data parallel grids match one process after 10 steps") {
  environment env;
  auto& w = env.world();
  single_process one(w);
  const auto ref = run_gpt(one.g);
  {
    // tp = 2 and pp = 2 on two-rank halves of the world; the other half does the same.
    world_comm half = w.split(w.rank() / 2, w.rank());
    grid tp2(half, {.tensor = 2});
    check_close(run_gpt(tp2), ref, "tp 2");
    grid pp2(half, {.pipeline = 2});
    const auto p = run_gpt(pp2);
    check_close(p, ref, "pp 2");
    // A pipeline alone changes no arithmetic: bitwise the single process.
    CHECK(weights_hash(p.master) == weights_hash(ref.master));
  }
  grid tp2pp2(w, {.tensor = 2, .pipeline = 2});
  check_close(run_gpt(tp2pp2), ref, "tp 2 x pp 2");
  grid tp2dp2(w, {.tensor = 2});
  check_close(run_gpt<zero<2>>(tp2dp2), ref, "tp 2 x dp 2, zero 2");
  grid pp2dp2(w, {.pipeline = 2});
  check_close(run_gpt<zero<1>>(pp2dp2), ref, "pp 2 x dp 2, zero 1");
  check_close(run_gpt<zero<3>>(pp2dp2), ref, "pp 2 x dp 2, zero 3 inside each stage");
}

TEST_CASE("gpipe and 1F1B give bitwise identical weights; 1F1B keeps fewer activations") {
  environment env;
  grid g(env.world(), {.pipeline = 4});
  const auto a = run_gpt<replicated, gpipe>(g, 3, 8, 16);
  const auto b = run_gpt<replicated, one_f_one_b>(g, 3, 8, 16);
  CHECK(weights_hash(a.master) == weights_hash(b.master));
  CHECK(a.losses == b.losses);
  // Stage s of p keeps at most p - s micro-batches in flight under 1F1B, all m under gpipe.
  INFO("activation bytes: gpipe " << a.activation_bytes << ", 1f1b " << b.activation_bytes);
  if (g.pp_rank() < g.pp_size() - 1) CHECK(b.activation_bytes < a.activation_bytes);
  // Ranks wait for their neighbours: the trainer reports it.
  double idle = b.idle;
  env.world().all_reduce(std::span<double>(&idle, 1), reduce_op::max);
  CHECK(idle > 0);
}

TEST_CASE("grids the model cannot use are config errors naming the numbers") {
  environment env;
  grid g(env.world(), {.pipeline = 4});
  trainer_options o;
  gpt::config tiny = small;
  tiny.layers = 1;  // embed, 1 block, ln_f, head, loss: 5 layers
  {
    grid pp4(env.world(), {.pipeline = 4});
    CHECK_NOTHROW(trainer<gpt::model, host>(pp4, gpt::make_model(tiny), o));
  }
  CHECK_THROWS_WITH(balance_stages(std::vector<std::size_t>(3, 10), 4),
                    strata_test::contains_text("pipeline of 4 stages for a model of 3 layers"));
  gpt::config six = small;
  six.heads = 6;
  six.dim = 24;
  CHECK_THROWS_WITH(gpt::make_model(six, 0, 4),
                    strata_test::contains_text("6 heads do not divide over 4 tensor-parallel ranks"));
  CHECK_THROWS_WITH((grid<world_comm>(env.world(), {.tensor = 3})), strata_test::contains_text("3"));
}
