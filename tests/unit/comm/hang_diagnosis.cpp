// diagnose_hang on hand-made dumps: what it concludes from each rank's last operations,
// and the JSON form a dump file has.
#include <array>

#include <strata/comm/hang_diagnosis.hpp>
#include <strata/comm/op_history_json.hpp>
#include "catch.hpp"

namespace {

strata::op_record op(std::uint64_t ticket, std::uint64_t seq, const char* name, std::size_t count, bool done,
                     int peer = -1) {
  strata::op_record o;
  o.ticket = ticket;
  o.seq = seq;
  o.op = name;
  o.count = count;
  o.bytes = count * 4;
  o.peer = peer;
  o.tag = seq ? -1 : 0;
  o.enqueued_ago = o.started_ago = 2.0;
  o.ended_ago = done ? 1.5 : -1;
  return o;
}

// Rank r of `world` ranks on one communicator "world" that holds them all, with `ops`.
strata::rank_dump dump_of(int r, int world, std::vector<strata::op_record> ops) {
  strata::comm_history c;
  c.name = "world";
  c.id = 7;
  for (int i = 0; i < world; ++i) c.members.push_back(i);
  c.rank = r;
  c.ops = std::move(ops);
  c.submitted = c.ops.empty() ? 0 : c.ops.back().ticket;
  for (const auto& o : c.ops) {
    c.collectives += o.seq != 0;
    if (o.done()) c.completed = o.ticket;
  }
  strata::rank_dump d;
  d.world_rank = r;
  d.world_size = world;
  d.reason = "test";
  d.comms.push_back(std::move(c));
  return d;
}

bool has(const strata::hang_diagnosis& h, const std::string& s) { return h.text().find(s) != std::string::npos; }

}  // namespace

TEST_CASE("the rank that did not reach a collective is named, with what it did last", "[diagnose]") {
  std::vector<strata::rank_dump> d{dump_of(0, 3, {op(1, 1, "all_reduce", 8, true), op(2, 2, "all_reduce", 8, false)}),
                                   dump_of(1, 3, {op(1, 1, "all_reduce", 8, true)}),
                                   dump_of(2, 3, {op(1, 1, "all_reduce", 8, true), op(2, 2, "all_reduce", 8, false)})};
  const auto h = strata::diagnose_hang(d, 3);
  INFO(h.text());
  REQUIRE(has(h,
              "all_reduce #2 of 8 elements on world (ranks 0-2): ranks 0, 2 wait (for 2.0 s); rank 1 did not "
              "reach all_reduce #2 on world"));
  REQUIRE(has(h, "rank 1: its last operation, all_reduce #1 of 8 elements on world, ended 1.5 s ago"));
  REQUIRE(h.waiting == std::vector<int>{0, 2});
  REQUIRE(h.not_reached == std::vector<int>{1});
  REQUIRE(h.missing.empty());
}

TEST_CASE("ranks without a dump are reported, and do not count as having reached", "[diagnose]") {
  std::vector<strata::rank_dump> d{dump_of(0, 4, {op(1, 1, "broadcast", 3, false, 0)}),
                                   dump_of(1, 4, {op(1, 1, "broadcast", 3, false, 0)})};
  const auto h = strata::diagnose_hang(d, 4);
  INFO(h.text());
  REQUIRE(has(h, "ranks 2, 3 gave no operations"));
  REQUIRE(has(h, "broadcast #1 of 3 elements from root rank 0 on world (ranks 0-3): ranks 0, 1 wait"));
  REQUIRE(has(h, "ranks 2, 3 unknown (no dump)"));
  REQUIRE(h.missing == std::vector<int>{2, 3});
}

TEST_CASE("collectives called in different orders are pointed out", "[diagnose]") {
  std::vector<strata::rank_dump> d{dump_of(0, 2, {op(1, 1, "all_reduce", 8, false)}),
                                   dump_of(1, 2, {op(1, 1, "all_gather", 16, false)})};
  const auto h = strata::diagnose_hang(d, 2);
  INFO(h.text());
  REQUIRE(has(h, "every member reached it"));
  REQUIRE(has(h,
              "collective #1 on world differs across ranks: rank 0 called all_reduce #1 of 8 elements; rank 1 "
              "called all_gather #1 of 16 elements"));
}

TEST_CASE("a receive without its send is named with its peer and tag", "[diagnose]") {
  auto r0 = dump_of(0, 2, {op(1, 1, "barrier", 0, true), op(2, 0, "recv", 5, false, 1)});
  auto r1 = dump_of(1, 2, {op(1, 1, "barrier", 0, true)});
  const std::vector<strata::rank_dump> d{r0, r1};
  const auto h = strata::diagnose_hang(d, 2);
  INFO(h.text());
  REQUIRE(has(h, "rank 0 waits in recv of 5 elements from rank 1 tag 0 on world (ranks 0, 1) (for 2.0 s)"));
  REQUIRE(h.waiting.empty());  // no collective is pending
}

TEST_CASE("nothing pending says so", "[diagnose]") {
  const std::vector<strata::rank_dump> d{dump_of(0, 1, {op(1, 1, "all_reduce", 8, true)})};
  REQUIRE(strata::diagnose_hang(d, 1).text() == "no operation is pending on any communicator\n");
}

TEST_CASE("a dump survives its JSON form; a file of something else is a config_error naming it", "[diagnose]") {
  const auto d = dump_of(1, 2, {op(1, 1, "all_reduce", 8, true), op(2, 0, "send", 3, false, 0)});
  const auto back = strata::parse_rank_dump(nlohmann::json(d).dump(), "x.json");
  REQUIRE(back.world_rank == 1);
  REQUIRE(back.comms.size() == 1);
  REQUIRE(back.comms[0].ops.size() == 2);
  REQUIRE(back.comms[0].ops[1].op == "send");
  REQUIRE(back.comms[0].ops[1].peer == 0);
  REQUIRE(back.comms[0].collectives_completed() == 1);
  REQUIRE_THROWS_WITH(strata::parse_rank_dump("{\"world_rank\": 1}", "r.json"),
                      strata_test::contains_text("r.json: not a strata operation dump"));
  REQUIRE_THROWS_WITH(strata::parse_rank_dump("not json", "r.json"), strata_test::contains_text("r.json"));
  auto wrong = d;
  wrong.comms[0].rank = 0;  // lists rank 0 where this process (world rank 1) should be
  REQUIRE_THROWS_WITH(strata::parse_rank_dump(nlohmann::json(wrong).dump(), "w.json"),
                      strata_test::contains_text("does not list world rank 1"));
}

TEST_CASE("the byte form ranks send and the JSON files read back the same dump", "[diagnose]") {
  auto d = dump_of(1, 2, {op(1, 1, "all_reduce", 8, true), op(2, 0, "recv", 3, false, 0)});
  d.host = "node \"7\"";
  d.comms[0].id = (std::uint64_t{3} << 32) | 5;  // beyond a double's 53 bits of integer
  strata::rank_dump w;
  REQUIRE(strata::from_wire(strata::to_wire(d), w));
  const strata::rank_dump j = strata::parse_rank_dump(strata::to_json_text(d), "rank-1.json");
  for (const strata::rank_dump* r : std::array<const strata::rank_dump*, 2>{&w, &j}) {
    REQUIRE(r->host == d.host);
    REQUIRE(r->comms.size() == 1);
    REQUIRE(r->comms[0].id == d.comms[0].id);
    REQUIRE(r->comms[0].members == d.comms[0].members);
    REQUIRE(r->comms[0].ops.size() == 2);
    REQUIRE(r->comms[0].ops[1].op == "recv");
    REQUIRE(r->comms[0].ops[1].ended_ago == -1);
    REQUIRE(r->comms[0].ops[0].ended_ago == 1.5);
  }
  // Cut short anywhere, the byte form is refused rather than read half.
  const std::string bytes = strata::to_wire(d);
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    strata::rank_dump cut;
    REQUIRE_FALSE(strata::from_wire(std::string_view(bytes).substr(0, n), cut));
  }
}
