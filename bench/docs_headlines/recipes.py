"""docs/recipes.md's headline figures: the held-out strains' recipes and the routing by species."""

from __future__ import annotations

from typing import Any, Callable

from bench.docs_headlines.core import Headline, span

DOC = "docs/recipes.md"
SUMMARY = "results/recipes/summary.json"
ROUTING = "results/recipes/routing.json"
STRAINS = ("ecoli_dh1", "saureus_rf122", "hpylori_sjm180")
"""The held-out strains in the order the text names them: DH1, RF122, SJM180."""


def _last(run: dict[str, Any], key: str) -> float:
    """A strain's figure: a number, or a curve by step whose last step counts."""
    value = run[key]
    return value[max(value, key=int)] if isinstance(value, dict) else value


def _strain_gaps(data: Any, first: str, second: str) -> list[float]:
    """``first - second`` per held-out strain, in the order of STRAINS."""
    return [_last(data["held_out"][g], first) - _last(data["held_out"][g], second) for g in STRAINS]


def _named_strain_gaps(first: str, second: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        dh1, rf122, sjm180 = (f"{g:.3f}" for g in _strain_gaps(data, first, second))
        return f"{dh1} (DH1), {rf122} (RF122) and {sjm180} bits/base (SJM180)"
    return value


def _fine_tuning_gain_range(data: Any) -> str:
    return span(_strain_gaps(data, "zero_shot_moe", "ft_curve"), "{:.3f}", "-")


def _pretrained_test_bits(data: Any) -> str:
    test = data["pretraining"]["moe"]["test_heldout_strains"]
    dh1, rf122, sjm180 = (test[f"test/{g}/bits_per_base"] for g in STRAINS)
    return f"DH1 {dh1:.4f}, RF122 {rf122:.4f}, SJM180 {sjm180:.4f} bits/base"


def _single_genome_ends(data: Any) -> str:
    return " / ".join(f"{_last(data['held_out'][g], 'single_curve'):.2f}" for g in STRAINS)


def _routing_divergence(data: Any) -> str:
    spec = data["specificity"]
    return (f"{spec['mean_within_species_jsd_bits']:.4f} bits within a species and "
            f"{spec['mean_between_species_jsd_bits']:.3f} bits between")


def _layer0_expert5(species: str, digits: int) -> Callable[[Any], str]:
    """The range over a species' genomes of the share of tokens layer 0 sends to expert 5."""
    def value(data: Any) -> str:
        shares = (v["fractions"]["0"][5] for v in data["genomes"].values() if v["species"] == species)
        return span(shares, f"{{:.{digits}f}}", "-")
    return value


HEADLINES = (
    Headline(DOC, "by 0.043 (DH1), 0.058 (RF122) and 0.051 bits/base (SJM180)", SUMMARY,
             _named_strain_gaps("markov6", "zero_shot_moe")),
    Headline(DOC, "DH1 1.8926, RF122 1.8195, SJM180 1.7924 bits/base", SUMMARY, _pretrained_test_bits),
    Headline(DOC, "the pooled test Markov baseline 1.9389", SUMMARY,
             lambda d: f"{d['pretraining']['moe']['test_heldout_strains']['test/markov_bits_per_base']:.4f}"),
    Headline(DOC, "by 0.005-0.011 bits/base", SUMMARY, _fine_tuning_gain_range),
    Headline(DOC, "0.148 (DH1), 0.140 (RF122) and 0.200 bits/base (SJM180)", SUMMARY,
             _named_strain_gaps("single_curve", "ft_curve")),
    Headline(DOC, "(2.03 / 1.97 / 1.97)", SUMMARY, _single_genome_ends),
    Headline(DOC, "0.0009 bits within a species and 0.060 bits between", ROUTING, _routing_divergence),
    Headline(DOC, "expert 5: 0.28-0.32", ROUTING, _layer0_expert5("ecoli", 2)),
    Headline(DOC, "0.004-0.025 of the *S. aureus*", ROUTING, _layer0_expert5("saureus", 3)),
)
