#!/usr/bin/env python3
"""scripts/lib/bench_report.py, the page scripts/bench writes, from canned benchmark outputs.

What a reader of docs/performance.md relies on: every column a benchmark printed reaches the
page (bench/collectives' gloo columns where the build has Gloo, none where it has not), and
rounds merge into medians. The outputs below are bench/collectives' and bench/optimizer's own
format, cut short.

Run by ctest (tests/CMakeLists.txt, tools.bench_report): test_bench_report.py
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "scripts", "lib")))
import bench_report  # noqa: E402

HEAD = """# strata bench/collectives: 2 processes, float, sum; times are medians of 2 iterations (max over ranks)
# ratio = busbw strata / busbw raw: the median over iterations of raw time / strata time, each pair
"""

WITH_GLOO = HEAD + """
# all_reduce
#      size(B)       count | strata(us)     algbw     busbw |    raw(us)     algbw     busbw |  ratio | gloo(us)     busbw  gloo/raw
       1048576      262144 |      178.5     5.873     5.873 |      117.5     8.921     8.921 |  0.675 |   3849.5     0.272     0.031
     268435456    67108864 |   482000.0     0.557     1.113 |   481000.0     0.558     1.115 |  0.994 | 401000.0     1.339     1.201
# all_reduce: median busbw ratio strata/raw for sizes >= 1 MiB: 0.835 (lowest 0.675)

# reduce_scatter
#      size(B)       count | strata(us)     algbw     busbw |    raw(us)     algbw     busbw |  ratio | gloo(us)     busbw  gloo/raw
       1048576      262144 |      159.5     6.574     3.287 |      637.7     1.644     0.822 |  4.084 |   2680.0     0.196     1.140
# reduce_scatter: median busbw ratio strata/raw for sizes >= 1 MiB: 4.084 (lowest 4.084)
"""

WITHOUT_GLOO = HEAD + """
# all_reduce
#      size(B)       count | strata(us)     algbw     busbw |    raw(us)     algbw     busbw |  ratio
       1048576      262144 |      178.5     5.873     5.873 |      117.5     8.921     8.921 |  0.675
# all_reduce: median busbw ratio strata/raw for sizes >= 1 MiB: 0.675 (lowest 0.675)
"""


def optimizer_output(bf16_vs_fp32):
    return f"""# bench/optimizer: 1 run
| params | threads | kernel | median ms | Gparam/s | GB/s | vs triad | time / fp32 |
|---|---|---|---|---|---|---|---|
| 2^24 | 1 | triad | 8.956 | 1.873 | 22.5 | 1.00 | - |
| 2^24 | 1 | adamw fp32 | 12.964 | 1.294 | 36.2 | 1.61 | 1.00 |
| 2^24 | 1 | adamw bf16 mixed | 13.255 | 1.266 | 35.4 | 1.57 | {bf16_vs_fp32} |

target (fp32 AdamW >= 80% of triad GB/s at >= 2^24 params): met
"""


def page_of(key, parser, text, section):
    runs = {key: {"command": f"bench/{key}", "parser": parser}}
    parsed = {key: bench_report.PARSERS[parser](text)}
    out = []
    section(runs, parsed, out)
    return "\n".join(out)


class Collectives(unittest.TestCase):
    def test_gloo_columns_reach_the_page(self):
        page = page_of("collectives", "collectives", WITH_GLOO, bench_report.section_collectives)
        self.assertIn("gloo = strata's `gloo_comm`", page)
        self.assertIn("| bytes | strata busbw | raw MPI busbw | ratio | gloo µs | gloo busbw | gloo / raw |", page)
        # The 256 MiB all_reduce row, with gloo's bus bandwidth and its ratio to raw MPI.
        self.assertIn("| 268,435,456 | 1.113 | 1.115 | 0.994 | 401000.0 | 1.339 | 1.201 |", page)
        self.assertIn("| 1,048,576 | 3.287 | 0.822 | 4.084 | 2680.0 | 0.196 | 1.140 |", page)

    def test_no_gloo_no_gloo_columns(self):
        page = page_of("collectives", "collectives", WITHOUT_GLOO, bench_report.section_collectives)
        self.assertNotIn("gloo", page)
        self.assertIn("| 1,048,576 | 5.873 | 8.921 | 0.675 |", page)

    def test_summary_lines(self):
        c = bench_report.parse_collectives(WITH_GLOO)
        self.assertEqual(c["summary"]["all_reduce"], (0.835, 0.675))
        self.assertEqual(c["summary"]["reduce_scatter"], (4.084, 4.084))

    def test_no_rows_is_an_error(self):
        with self.assertRaises(bench_report.ParseError):
            bench_report.parse_collectives(HEAD)


class Optimizer(unittest.TestCase):
    def test_mixed_ratio_reaches_the_page(self):
        page = page_of("optimizer", "optimizer", optimizer_output("1.03"), bench_report.section_optimizer)
        self.assertIn("| 2^24 | 1 | 22.5 | 36.2 (1.61) | - | - | - | 1.03× | - |", page)
        self.assertIn("- target (fp32 AdamW >= 80% of triad GB/s at >= 2^24 params): met", page)


class Rounds(unittest.TestCase):
    def test_rounds_merge_into_medians(self):
        results = [{"tokens_per_s": t} for t in (3782.0, 5348.0, 5222.0)]
        runs = {"qwen2_peer_M": {"parser": "qwen2_peer"}}
        parsed = {"qwen2_peer_M": results[0], "qwen2_peer_M.r2": results[1], "qwen2_peer_M.r3": results[2]}
        bench_report.merge_rounds(runs, parsed)
        self.assertEqual(list(parsed), ["qwen2_peer_M"])
        self.assertEqual(parsed["qwen2_peer_M"]["tokens_per_s"], 5222.0)
        self.assertEqual(parsed["qwen2_peer_M"]["rounds"], 3)


if __name__ == "__main__":
    unittest.main()
