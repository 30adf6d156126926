"""docs/quality.md's headline figures: the corpus study of MoE against dense, the repeat expert."""

from __future__ import annotations

from typing import Any, Callable

from bench.docs_headlines.core import Headline, span

DOC = "docs/quality.md"
EXPERTS = "results/experts/summary.json"
STUDY = "results/experts/study/summary.json"
MUTATIONS = "results/experts/mutations.json"
REPEAT_MIX = "results/quality/run-summaries/ecoli-mutation.repeat-mix.json"
FOLLOW_COPIES = "results/quality/run-summaries/ecoli-mutation-1000-steps-follow-copies.json"
OWN_MARKOV_GENOMES = ("mmaripaludis_s2", "pfalciparum", "dmauritiana_chr4")
"""The held-out species whose own order-6 Markov chains the text averages."""


def _contender(data: Any, name: str) -> dict[str, Any]:
    return next(c for c in data["contenders"] if c["name"] == name)


def _final(data: Any, name: str, group: str) -> float:
    return _contender(data, name)["final"][group]


def _speed_over_dense(name: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        return f"{_contender(data, name)['tokens_per_s'] / _contender(data, 'base-dense')['tokens_per_s']:.2f}x"
    return value


def _gain_over_dense(name: str, group: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        return f"{_final(data, 'base-dense', group) - _final(data, name, group):.3f}"
    return value


def _moe_below_dense_on_held_out_species(data: Any) -> str:
    moe, dense = (_final(data, name, "held-out species") for name in ("base-moe", "base-dense"))
    return f"{dense - moe:.3f} bits/base below dense ({moe:.4f} against {dense:.4f})"


def _own_markov(data: Any) -> str:
    orders = data["order_6_bits_per_base"]
    mean = sum(orders[g]["bits_per_base"] for g in OWN_MARKOV_GENOMES) / len(OWN_MARKOV_GENOMES)
    return f"chr 4 {orders['dmauritiana_chr4']['bits_per_base']:.4f}, mean {mean:.4f}"


def _auroc_range(scorer: str, contrast: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        return span((g[scorer]["auroc"][contrast] for g in data["genomes"].values()), "{:.2f}")
    return value


def _cost_on_repeats(data: Any) -> str:
    return (f"{data['base_on_repeats_bits_per_base']:.2f} bits/base while the mixture pays "
            f"{data['mixed_on_repeats_bits_per_base']:.2f}")


def _follow_copies_tuning(data: Any) -> str:
    exact = next(r for r in data["rows"] if not r["follow_copies"])
    return f"{exact['mixed_bits_per_base']:.4f} → {data['best']['mixed_bits_per_base']:.4f}"


def _follow_copies_savings(data: Any) -> str:
    val = data["validation"]
    gains = [a - b for a, b in zip(val["val/repeat_mix_bits_per_base"], val["val/repeat_copy_mix_bits_per_base"])]
    return span(gains, "{:.3f}")


def _moe_speed_row(data: Any) -> str:
    row = next(c for c in data["contenders"] if (c["size"], c["variant"], c["kernels"]) == ("4x", "moe", "torch"))
    return f"{row['tokens_per_s'] / 1e3:.0f}k ({row['vs_dense']:.2f}x)"


def _cost_to_reach_dense(name: str, group: str, target: str, quoted: str) -> Callable[[Any], str]:
    """``quoted`` filled with the tokens and training GPU time ``name`` needs to first reach the dense
    model's bits/base of ``group`` (``target`` "lowest", or "budget": its value at the largest token
    count every model reached), as multiples of the dense model's own: what the study's report computes."""
    def value(data: Any) -> str:
        from bench.experts import at_tokens, best, contenders_in, cost_ratios

        contenders = {c.name: c for c in contenders_in(data)}
        dense = contenders["base-dense"]
        if target == "lowest":
            goal = best(dense, group)[1]
        else:
            common = min(max(t for t, _ in c.curve[group]) for c in contenders.values())
            goal = at_tokens(dense, group, common)
        tokens, time = cost_ratios(contenders[name], dense, group, goal)
        return quoted.format(tokens=tokens, time=time)
    return value


HEADLINES = (
    Headline(DOC, "MoE is 0.015 bits/base below dense (1.8771 against 1.8922)", EXPERTS,
             _moe_below_dense_on_held_out_species),
    Headline(DOC, "MoE runs at 0.85x dense's tokens/s", EXPERTS, _speed_over_dense("base-moe")),
    Headline(DOC, "at 0.58x dense's speed with torch's grouped GEMM", EXPERTS, _speed_over_dense("base-fine")),
    Headline(DOC, "*D. mauritiana* chr 4 1.8579, mean 1.7966", "results/experts/markov-own.json", _own_markov),
    Headline(DOC, "(stop-gain vs synonymous 0.26–0.39", MUTATIONS, _auroc_range("model", "stop_gain_vs_synonymous")),
    Headline(DOC, "missense 0.42–0.49; Markov", MUTATIONS, _auroc_range("model", "missense_vs_synonymous")),
    Headline(DOC, "the 8-expert model by 0.028 bits/base at 503M", STUDY,
             _gain_over_dense("base-moe", "held-out strains")),
    Headline(DOC, "the fine-grained one by 0.009", STUDY, _gain_over_dense("base-fine", "held-out strains")),
    Headline(DOC, "(it trains at 0.58x dense's tokens/s here)", STUDY, _speed_over_dense("base-fine")),
    Headline(DOC, "the network alone pays 1.76 bits/base while the mixture pays 0.22", REPEAT_MIX, _cost_on_repeats),
    Headline(DOC, "(exact matches 1.8099 → 1.7909 there)", "results/quality/repeats/tune_copies_on_training.json",
             _follow_copies_tuning),
    Headline(DOC, "saved another 0.025–0.029 bits/base", FOLLOW_COPIES, _follow_copies_savings),
    Headline(DOC, "moe 410k (0.81x)", "results/experts/speed/speed.json", _moe_speed_row),
    Headline(DOC, "with 0.73x the tokens and **0.91x the GPU time**", STUDY,
             _cost_to_reach_dense("base-moe", "held-out strains", "lowest", "{tokens} the tokens and **{time}")),
    Headline(DOC, "the fine-grained one with 0.80x the tokens but", STUDY,
             _cost_to_reach_dense("base-fine", "held-out strains", "lowest", "{tokens} the tokens")),
    Headline(DOC, "1.37x the GPU time (its step costs 1.7x the dense step)", STUDY,
             _cost_to_reach_dense("base-fine", "held-out strains", "lowest", "{time} the GPU time")),
    Headline(DOC, "reaches dense's value at the budget with 0.88x the tokens and", STUDY,
             _cost_to_reach_dense("base-fine", "held-out species", "budget", "{tokens} the tokens")),
    Headline(DOC, "1.50x the GPU time, and never reaches dense's lowest", STUDY,
             _cost_to_reach_dense("base-fine", "held-out species", "budget", "{time} the GPU time")),
)
