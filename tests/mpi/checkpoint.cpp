// strata-ranks: 4
// strata-gloo-ranks: 4
// Checkpoints: resuming at the same layout continues bit-identically for every stage, a
// warmup-then-decay lr schedule and a skipped step included; a checkpoint loads at
// another data-parallel size and stage with the same weights and loss, and trains on as
// the saved run does; corrupt, truncated or foreign checkpoints are refused with the file
// named; a version-2 manifest (before replica offsets) still loads, a newer one is refused.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "catch.hpp"
#include "mlp_run.hpp"
#include "poisoned_mlp.hpp"
#include "shared_dir.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

using test::shared_dir;

// The first `n` ranks of the world as their own data-parallel group (others get none).
struct sub_world {
  world_comm comm;
  std::optional<grid<world_comm>> g;
  sub_world(world_comm& w, int n) : comm(w.split(w.rank() < n ? 0 : 1, w.rank())) {
    if (w.rank() < n) g.emplace(comm);
  }
};

template <class S, class O = adamw, class P = fp32>
using mlp_trainer = trainer<mlp::model, host, S, O, P>;

template <class Trainer>
void train(Trainer& tr, const test::mlp_setup& s, long from, long to) {
  mlp::synthetic_data data(s.shape, s.seed);
  auto& g = tr.grid_ref();
  const long local = s.global_batch / g.dp_size();
  strata::batch<> b;
  for (long step = from; step < to; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
    tr.step(b);
  }
}

template <class Trainer>
float eval_at(Trainer& tr, const test::mlp_setup& s, long step) {
  mlp::synthetic_data data(s.shape, s.seed);
  auto& g = tr.grid_ref();
  const long local = s.global_batch / g.dp_size();
  strata::batch<> b;
  data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
  return tr.evaluate(b);
}

template <class S, class P>
void check_resume_bit_identical(const char* tag) {
  environment env;
  grid g(env.world());
  shared_dir dir(env.world(), tag);
  test::mlp_setup s;
  s.opts.micro_batches = 2;
  if constexpr (std::is_same_v<P, mixed<fp16>>)
    s.opts.loss_scaler.loss_scale_window = 3;  // scale changes inside the run
  mlp_trainer<S, adamw, P> straight(g, mlp::make_model(s.shape), s.opts);
  train(straight, s, 0, 20);
  const auto want = weights_hash(straight.gather_master());

  mlp_trainer<S, adamw, P> first(g, mlp::make_model(s.shape), s.opts);
  train(first, s, 0, 10);
  first.save(dir.path, {{"data_position", 10}});
  mlp_trainer<S, adamw, P> resumed(g, mlp::make_model(s.shape), s.opts);
  const auto extra = resumed.load(dir.path);
  CHECK(resumed.steps_done() == 10);
  CHECK(extra.at("data_position") == 10);
  CHECK(resumed.loss_scale() == first.loss_scale());
  train(resumed, s, 10, 20);
  CHECK(weights_hash(resumed.gather_master()) == want);
}

}  // namespace

TEST_CASE("resume at the same layout is bit-identical to an uninterrupted run, every stage") {
  check_resume_bit_identical<replicated, fp32>("resume0");
  check_resume_bit_identical<zero<1>, fp32>("resume1");
  check_resume_bit_identical<zero<2>, mixed<bf16>>("resume2");
  check_resume_bit_identical<zero<3>, fp32>("resume3");
  check_resume_bit_identical<zero<3, offload_optimizer>, mixed<fp16>>("resume3o");
}

namespace {
// DeepSpeed's WarmupDecayLR with a linear warmup, written out here rather than taken from
// optim/schedule.hpp: the rate of the k-th update (0-based). As in DeepSpeed's engine, a
// step skipped for an overflow does not advance the schedule (it reports the rate it
// would have used, and the next step uses it again).
constexpr double min_lr = 1e-4, max_lr = 4e-3;
constexpr long warmup = 6, total = 14;
double warmup_decay_lr(long k) {
  if (k < warmup) return min_lr + (max_lr - min_lr) * static_cast<double>(k) / warmup;
  return min_lr + (max_lr - min_lr) * std::max(0.0, static_cast<double>(total - k) / (total - warmup));
}

// Steps [from, to) of the poisoned mlp (1-based step from + 1 first), their statistics.
template <class Trainer>
std::vector<step_stats> run_steps(Trainer& tr, const test::mlp_setup& s, long from, long to) {
  mlp::synthetic_data data(s.shape, s.seed);
  auto& g = tr.grid_ref();
  const long local = s.global_batch / g.dp_size();
  strata::batch<> b;
  std::vector<step_stats> out;
  for (long step = from; step < to; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
    out.push_back(tr.step(b));
  }
  return out;
}

// Every step's lr is the formula's at the updates taken before it: the steps before it,
// less the skipped one if it came before (the skipped step itself reports the rate it
// would have used, which the step after it uses).
void check_lrs(const std::vector<step_stats>& stats, long first_step, long skipped) {
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const long step = first_step + static_cast<long>(i);
    const double want = warmup_decay_lr(step - 1 - (step > skipped ? 1 : 0));
    INFO("step " << step << " (reported " << stats[i].step << "): lr " << stats[i].lr << ", the formula's " << want);
    CHECK(stats[i].step == step);
    CHECK(std::abs(stats[i].lr - want) <= 1e-6 * want);  // the schedule's double rounded to float
  }
}

// 12 steps of warmup (6 steps) then decay, step 3 skipped (an inf gradient on the last
// rank), saved after step 4 (inside the warmup) and resumed into a fresh trainer: the
// resumed steps have the uninterrupted run's lrs, losses and, at the end, weights.
// Mutations that fail it: in train/detail/trainer_body.hpp, load() resuming one step off
// (`counters_.step = st.step + 1;`: step 5 reports step 6 and the next lr), or a schedule
// that advances on the skipped step too (`s.lr = opts_.schedule.lr(counters_.step - 1);`:
// step 4 gets lr(3), in both runs alike, so the weights' hashes still agree and only the
// lrs tell).
template <class S, class P>
void check_schedule_resume(const char* tag) {
  environment env;
  grid g(env.world());
  shared_dir dir(env.world(), tag);
  test::mlp_setup s;
  s.steps = 12;
  s.opts.micro_batches = 2;
  s.opts.schedule = lr_schedule::warmup_decay(min_lr, max_lr, warmup, total, lr_schedule::warmup_curve::linear);
  constexpr long skipped = 3, saved_at = 4;
  static_assert(saved_at < warmup && skipped < saved_at);
  const auto poison = [&] {
    test::poison_rank = g.dp_size() - 1;
    test::poison_call = (skipped - 1) * s.opts.micro_batches;  // the first micro-batch of step 3
    test::poison_calls = 1;
    test::backward_calls = 0;
  };
  using poisoned_trainer = trainer<test::poisoned_model, host, S, adamw, P>;

  poison();
  poisoned_trainer straight(g, test::make_poisoned(s.shape), s.opts);
  const auto all = run_steps(straight, s, 0, s.steps);
  REQUIRE(all.size() == static_cast<std::size_t>(s.steps));
  CHECK(straight.skipped_steps() == std::vector<long>{skipped});
  CHECK(all[skipped - 1].skipped);
  check_lrs(all, 1, skipped);
  const auto want = weights_hash(straight.gather_master());

  poison();
  poisoned_trainer first(g, test::make_poisoned(s.shape), s.opts);
  check_lrs(run_steps(first, s, 0, saved_at), 1, skipped);
  first.save(dir.path);
  test::poison_rank = -1;
  poisoned_trainer resumed(g, test::make_poisoned(s.shape), s.opts);
  resumed.load(dir.path);
  CHECK(resumed.steps_done() == saved_at);
  CHECK(resumed.skipped_steps() == std::vector<long>{skipped});
  const auto rest = run_steps(resumed, s, saved_at, s.steps);
  REQUIRE(rest.size() == static_cast<std::size_t>(s.steps - saved_at));
  check_lrs(rest, saved_at + 1, skipped);
  for (std::size_t i = 0; i < rest.size(); ++i) {
    INFO("step " << saved_at + 1 + static_cast<long>(i));
    CHECK(rest[i].loss == all[saved_at + i].loss);
    CHECK(rest[i].lr == all[saved_at + i].lr);
    CHECK_FALSE(rest[i].skipped);
  }
  CHECK(weights_hash(resumed.gather_master()) == want);
}
}  // namespace

TEST_CASE("warmup then decay: every step's lr, across a skipped step and a resume inside the warmup") {
  check_schedule_resume<zero<2>, mixed<bf16>>("schedule-bf16");
  check_schedule_resume<zero<3, offload_optimizer>, mixed<fp16>>("schedule-fp16");
}

namespace {
// Broadcasts world rank 0's vector to every rank.
void share(world_comm& w, std::vector<float>& v) {
  std::size_t n = v.size();
  w.broadcast(std::span<std::size_t>(&n, 1), 0);
  v.resize(n);
  w.broadcast(std::span<float>(v), 0);
}

// Saves at (dp = from_n, stage SaveS), loads at (dp = to_n, stage LoadS): the gathered
// master weights are bitwise the saved ones, the loss right after loading equals the
// saved trainer's loss on the same batch, and two more steps from the checkpoint end
// where the saved trainer's two more steps do: the moments came back too (mutation:
// zero the moments after load_checkpoint in train/detail/checkpoint_view.hpp's load();
// the weights then end 2.2e-2 relative away).
template <class SaveS, class LoadS>
void check_reshard(int from_n, int to_n, const char* tag) {
  environment env;
  auto& w = env.world();
  shared_dir dir(w, tag);
  test::mlp_setup s;
  s.global_batch = 48;  // divisible by 1, 2, 3, 4
  std::vector<float> saved_master, trained_on;
  float saved_loss = 0;
  {
    sub_world sw(w, from_n);
    if (sw.g) {
      mlp_trainer<SaveS> tr(*sw.g, mlp::make_model(s.shape), s.opts);
      train(tr, s, 0, 6);
      tr.save(dir.path);
      saved_master = tr.gather_master();
      saved_loss = eval_at(tr, s, 6);
      train(tr, s, 6, 8);
      trained_on = tr.gather_master();
    }
  }
  w.broadcast(std::span<float>(&saved_loss, 1), 0);
  share(w, saved_master);
  share(w, trained_on);
  REQUIRE_FALSE(saved_master.empty());
  sub_world sw(w, to_n);
  if (sw.g) {
    mlp_trainer<LoadS> tr(*sw.g, mlp::make_model(s.shape), s.opts);
    tr.load(dir.path);
    CHECK(tr.steps_done() == 6);
    CHECK(weights_hash(tr.gather_master()) == weights_hash(saved_master));
    const float loss = eval_at(tr, s, 6);
    INFO(tag << ": loss after load " << loss << ", saved " << saved_loss);
    CHECK(std::abs(loss - saved_loss) <= 1e-6f * std::abs(saved_loss));
    // It trains on as the saved run does: bitwise at the same data-parallel size (every
    // stage gives the same bits), otherwise within the gradient sums' order: 1e-6
    // relative (measured at most 1.1e-8).
    train(tr, s, 6, 8);
    const auto after = tr.gather_master();
    const double d = test::relative_distance(after, trained_on);
    INFO(tag << ": two steps after loading, relative distance " << d << " from the saved run's");
    if (sw.g->dp_rank() == 0)
      std::printf("%s: two steps after loading, weights %.3g relative from the saved run's\n", tag, d);
    if (from_n == to_n)
      CHECK(weights_hash(after) == weights_hash(trained_on));
    else
      CHECK(d <= 1e-6);
  }
  w.barrier();
}
}  // namespace

TEST_CASE("a checkpoint loads at another data-parallel size and stage") {
  check_reshard<zero<3>, replicated>(4, 2, "r1");  // (dp4, z3) -> (dp2, z0)
  check_reshard<zero<3>, replicated>(4, 1, "r2");  // (dp4, z3) -> one process
  check_reshard<zero<3>, zero<2>>(4, 3, "r3");     // (dp4, z3) -> (dp3, z2)
  check_reshard<zero<2>, zero<1>>(4, 4, "r4");     // (dp4, z2) -> (dp4, z1)
  check_reshard<zero<1>, zero<3>>(2, 4, "r5");     // (dp2, z1) -> (dp4, z3)
  check_reshard<replicated, zero<2>>(1, 4, "r6");  // one process -> (dp4, z2)
  check_reshard<replicated, zero<3>>(4, 3, "r7");  // (dp4, z0) -> (dp3, z3)
}

TEST_CASE("corrupt, truncated and foreign checkpoints are refused, naming the file") {
  environment env;
  grid g(env.world());
  shared_dir dir(env.world(), "corrupt");
  test::mlp_setup s;
  {
    mlp_trainer<zero<2>> tr(g, mlp::make_model(s.shape), s.opts);
    train(tr, s, 0, 2);
    tr.save(dir.path);
  }
  const fs::path step_dir = dir.path / "step-00000002";
  const fs::path shard = step_dir / "rank-00001.bin";
  const auto size = fs::file_size(shard);
  auto load_error = [&]() -> std::string {
    mlp_trainer<zero<2>> tr(g, mlp::make_model(s.shape), s.opts);
    try {
      tr.load(dir.path);
    } catch (const checkpoint_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(load_error() == "no error");

  // A flipped bit in the middle of rank 1's shard.
  if (env.rank() == 0) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&c, 1);
  }
  env.world().barrier();
  auto msg = load_error();
  CHECK_THAT(msg,
             strata_test::contains_text("rank-00001.bin") && strata_test::contains_text("checksum does not match"));

  // Truncated.
  if (env.rank() == 0) fs::resize_file(shard, size - 100);
  env.world().barrier();
  msg = load_error();
  CHECK_THAT(msg, strata_test::contains_text("rank-00001.bin") && strata_test::contains_text("truncated"));

  // Another model: same directory, different hidden size.
  test::mlp_setup other = s;
  other.shape.hidden = 24;
  mlp_trainer<zero<2>> tr(g, mlp::make_model(other.shape), other.opts);
  if (env.rank() == 0) fs::resize_file(shard, size);  // size right again; the model check comes first
  env.world().barrier();
  try {
    tr.load(dir.path);
    FAIL("a checkpoint of another model loaded");
  } catch (const checkpoint_error& e) {
    CHECK_THAT(std::string(e.what()), strata_test::contains_text("manifest.json") &&
                                          strata_test::contains_text("checkpoint of another model"));
  }
  // A directory with no checkpoint.
  CHECK_THROWS_WITH(tr.load(dir.path / "nothing"), strata_test::contains_text("no checkpoint here"));
}

// Format 3 added each bucket's replica_offset (decision 0042). A model without ties has
// the same files in both formats, so a format-3 checkpoint with its manifest written as
// format 2 (the field left out) must load the same weights; format 4 is refused by name.
TEST_CASE("a format-2 manifest still loads; a newer format is refused") {
  environment env;
  grid g(env.world());
  shared_dir dir(env.world(), "format2");
  test::mlp_setup s;
  std::vector<float> saved;
  {
    mlp_trainer<replicated> tr(g, mlp::make_model(s.shape), s.opts);
    train(tr, s, 0, 2);
    tr.save(dir.path);
    saved = tr.gather_master();
  }
  const fs::path manifest = dir.path / "step-00000002" / "manifest.json";
  const auto rewrite = [&](int version) {
    if (env.rank() == 0) {
      std::ifstream in(manifest);
      nlohmann::json m = nlohmann::json::parse(in);
      in.close();
      m["format_version"] = version;
      for (auto& group : m["groups"])
        for (auto& b : group["buckets"]) b.erase("replica_offset");
      std::ofstream(manifest) << m.dump();
    }
    env.world().barrier();
  };
  rewrite(2);
  {
    mlp_trainer<replicated> z0(g, mlp::make_model(s.shape), s.opts);
    z0.load(dir.path);
    CHECK(z0.gather_master() == saved);
    mlp_trainer<zero<2>> z2(g, mlp::make_model(s.shape), s.opts);
    z2.load(dir.path);
    CHECK(z2.gather_master() == saved);
  }
  rewrite(4);
  mlp_trainer<replicated> tr(g, mlp::make_model(s.shape), s.opts);
  CHECK_THROWS_WITH(tr.load(dir.path),
                    strata_test::contains_text("format version 4, this strata reads versions 2 to 3"));
}
