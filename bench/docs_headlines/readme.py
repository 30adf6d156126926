"""README.md's headline figures: the E. coli run, the recipes' genomes, the expert kernels and the
bench sweep's run-to-run noise."""

from __future__ import annotations

import statistics
from typing import Any, Callable

from bench.docs_headlines.core import Headline, percent, span

REPEAT_MIX = "results/quality/run-summaries/ecoli-mutation.repeat-mix.json"
RECIPES = "results/recipes/summary.json"
SWEEP = "results/bench/sweep/small-shapes.json"
HOST_BOUND_SHAPES = ("genome", "dna-small")


def _markov_gap(genome: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        run = data["genome_recipe"][genome]
        return f"{run['markov6'] - run['kept_checkpoint']['bits_per_base']:.3f}"
    return value


def _torch_over_te_layers(data: Any) -> str:
    medians = {(c["size"], c["variant"], c["kernels"]): statistics.median(r["tokens_per_s"] for r in c["runs"]
                                                                            if "tokens_per_s" in r)
               for c in data["contenders"]}
    ratios = [medians[(s, v, "torch")] / medians[(s, v, "te")] for (s, v, k) in medians
              if k == "te" and (s, v, "torch") in medians and v in ("dense", "moe")]
    return span(ratios, "{:.2f}", "-") + "x"


def _zero_shot_gaps(data: Any) -> str:
    return span((g["markov6"] - g["zero_shot_moe"] for g in data["held_out"].values()), "{:.2f}")


def _best_markov(data: Any) -> str:
    return f"{min(r['bits_per_base'] for r in data['rows']):.3f}"


def _machine_and_wall_clock(data: Any) -> str:
    machine = "H200" if "H200" in data["hardware"] else data["hardware"]
    return f"{machine}, {data['wall_clock_s']} s"


def _host_bound_fit_spread(data: Any) -> str:
    """The farthest any ``cli.py fit`` bf16 run of a host-bound shape lies from its row's median: the
    noise README warns of beside the sweep's table."""
    rows = [r for r in data["records"] if r["shape"] in HOST_BOUND_SHAPES and r["contender"] == "biomoe-cli"
            and r["precision"] == "bf16" and r["status"] == "ok"]
    return percent(max(abs(run / statistics.median(r["runs"]) - 1) for r in rows for run in r["runs"]))


HEADLINES = (
    Headline("README.md", "reaches **1.775 bits/base**", REPEAT_MIX, lambda d: f"{d['mixed_bits_per_base']:.3f}"),
    Headline("README.md", "the network alone 1.841", REPEAT_MIX, lambda d: f"{d['base_bits_per_base']:.3f}"),
    Headline("README.md", "the best Markov model 1.936", "results/quality/markov_ecoli536.json", _best_markov),
    Headline("README.md", "one H200, 518 s", "results/quality/run-summaries/ecoli-mutation.json",
             _machine_and_wall_clock),
    Headline("README.md", "it ends 0.093 (*H. pylori*)", RECIPES, _markov_gap("hpylori_sjm180")),
    Headline("README.md", "and 0.087 bits/base (*S. aureus*)", RECIPES, _markov_gap("saureus_rf122")),
    Headline("README.md", "(1.15-1.46x faster there)", "results/experts/speed/speed.json", _torch_over_te_layers),
    Headline("README.md", "strain 0.04–0.06 bits/base below", RECIPES, _zero_shot_gaps),
    Headline("README.md", "up to 18 % from its row's median", SWEEP, _host_bound_fit_spread),
)
