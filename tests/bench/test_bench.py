"""The benchmark's CPU-checkable parts: the FLOP count and the shared starting weights.

The bench compares HF Mixtral and biomoe losses step by step, which only means something if both
start from the same weights and compute the same function; that is checked here on the tiny shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from bench.models import build_biomoe, build_hf, reference_init  # noqa: E402
from bench.shapes import SHAPES  # noqa: E402
from conftest import ROOT

CPU = torch.device("cpu")


def test_flops_count_matmuls_and_causal_attention():
    shape = SHAPES["tiny"]
    head_dim = shape.hidden // shape.heads
    attn = 2 * shape.hidden**2 + 2 * shape.hidden * shape.kv_heads * head_dim
    moe = shape.top_k * 3 * shape.hidden * shape.ffn + shape.hidden * shape.experts
    n_active = shape.layers * (attn + moe) + shape.hidden * shape.vocab
    tokens = shape.seq * shape.micro_batch
    expected = 6 * n_active * tokens + 6 * shape.layers * shape.hidden * shape.seq * tokens
    assert shape.flops_per_step() == pytest.approx(expected)


def test_biomoe_started_from_the_hf_reference_computes_the_same_logits():
    shape = SHAPES["tiny"]
    init = reference_init(shape, CPU, seed=0)
    torch.manual_seed(0)  # the bench seeds every contender the same way: HF rebuilds the same weights
    hf = build_hf(shape, "eager", CPU)
    bio = build_biomoe(shape, "grouped", "bf16", CPU, init=init)
    ids = torch.randint(4, 8, (shape.micro_batch, shape.seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf_logits = hf.model(input_ids=ids, use_cache=False).logits.float()
        bio_logits = bio.model(ids).logits.float()
    rel = (bio_logits - hf_logits).norm() / hf_logits.norm()
    assert rel < 3e-2, float(rel)  # bf16 weights and activations on both sides


def test_independent_init_differs_from_the_reference():
    """Guards the test above: without the reference weights the two models disagree."""
    shape = SHAPES["tiny"]
    torch.manual_seed(0)
    hf = build_hf(shape, "eager", CPU)
    torch.manual_seed(123)
    bio = build_biomoe(shape, "grouped", "bf16", CPU)
    ids = torch.randint(4, 8, (1, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf_logits = hf.model(input_ids=ids, use_cache=False).logits.float()
        bio_logits = bio.model(ids).logits.float()
    assert (bio_logits - hf_logits).norm() / hf_logits.norm() > 0.1


# ----------------------------------------------------------------------------- the row plan
from bench.records import (BASELINE, HF_STRONGEST, BenchRecord, Row, combine_runs, fastest_hf,  # noqa: E402
                           fill_ratios, select_rows)
from bench.report import markdown, report_dict  # noqa: E402
from bench.run import (DEFAULT_CONTENDERS, BenchContext, genome_tokens, main, measure,  # noqa: E402
                              plan_rows, shape_config)
from bench.shapes import DEFAULT_CASES, parse_case  # noqa: E402
from bench.timing import PEAK_BF16_TFLOPS, throughput  # noqa: E402


def test_cases_name_a_shape_and_its_tokens_per_step():
    big = parse_case("mixtral-2layer@16384")
    assert (big.seq, big.micro_batch, big.case) == (4096, 4, "mixtral-2layer@16384")
    assert parse_case("dna-small").case == "dna-small@16384"  # seq 8192 x 2, as configs/dna-small.yaml
    assert parse_case("genome").case == "genome@65536"  # seq 1024 x 64, as configs/genome.yaml
    assert [parse_case(c).tokens_per_step for c in DEFAULT_CASES] == [65536, 16384, 4096, 16384]
    for bad in ("mixtral-2layer@5000", "mixtral-2layer@0", "nope@4096"):
        with pytest.raises(ValueError):
            parse_case(bad)


def test_plan_puts_the_baseline_first_and_sweeps_precisions_where_they_apply():
    cases = [parse_case("tiny"), parse_case("tiny@512")]
    rows = plan_rows(cases, list(reversed(DEFAULT_CONTENDERS)), ["bf16", "fp8-block"], ["bf16"])
    for case in cases:
        mine = [r for r in rows if r.shape.case == case.case]
        assert mine[0].contender == BASELINE
        by = {(r.contender, r.precision) for r in mine}
        assert ("biomoe-cli", "fp8-block") in by and ("biomoe-loop", "fp8-block") in by
        assert ("hf-bf16-fused", "fp8-block") not in by and ("biomoe-cli-nocallbacks", "fp8-block") not in by
        assert {c for c, _ in by} == set(DEFAULT_CONTENDERS)
    with pytest.raises(ValueError, match="unknown contender"):
        plan_rows(cases, ["hf-nope"], ["bf16"], ["bf16"])


def test_row_filter_keeps_the_baseline_of_each_kept_shape():
    rows = plan_rows([parse_case("tiny"), parse_case("dna-small")], list(DEFAULT_CONTENDERS), ["bf16", "fp8-block"],
                     ["bf16"])
    kept = select_rows(rows, ["tiny@256/biomoe-cli/*"])
    assert [r.id for r in kept] == ["tiny@256/hf-bf16-fused/bf16", "tiny@256/hf-bf16-fused-compile/bf16",
                                    "tiny@256/hf-eager/bf16", "tiny@256/hf-eager-compile/bf16",
                                    "tiny@256/biomoe-cli/bf16", "tiny@256/biomoe-cli/fp8-block"]
    assert select_rows(rows, []) == rows


def test_ratios_are_against_the_baseline_of_the_same_shape_and_tokens():
    tiny, wide = parse_case("tiny"), parse_case("tiny@512")
    recs = [BenchRecord.for_row(Row(tiny, BASELINE, "bf16"), tokens_per_s=100.0),
            BenchRecord.for_row(Row(tiny, "biomoe-cli", "bf16"), tokens_per_s=150.0),
            BenchRecord.for_row(Row(tiny, "biomoe-loop", "bf16"), status="error", error="boom"),
            BenchRecord.for_row(Row(wide, "biomoe-cli", "bf16"), tokens_per_s=300.0)]
    fill_ratios(recs)
    assert [r.ratio_vs_hf_bf16_fused for r in recs] == [1.0, 1.5, None, None]


def test_the_baseline_is_the_fastest_hf_configuration_of_the_same_shape_and_it_is_named():
    tiny, wide = parse_case("tiny"), parse_case("tiny@512")
    assert set(HF_STRONGEST) <= set(DEFAULT_CONTENDERS)
    recs = [BenchRecord.for_row(Row(tiny, BASELINE, "bf16"), tokens_per_s=100.0),
            BenchRecord.for_row(Row(tiny, "hf-eager", "bf16"), tokens_per_s=120.0),
            BenchRecord.for_row(Row(tiny, "hf-eager-compile", "bf16"), status="error", error="boom"),
            BenchRecord.for_row(Row(tiny, "hf-amp-fused", "bf16"), tokens_per_s=500.0),  # not a baseline config
            BenchRecord.for_row(Row(tiny, "biomoe-cli", "bf16"), tokens_per_s=150.0),
            BenchRecord.for_row(Row(wide, "hf-bf16-fused-compile", "bf16"), tokens_per_s=80.0),
            BenchRecord.for_row(Row(wide, BASELINE, "bf16"), tokens_per_s=60.0),
            BenchRecord.for_row(Row(wide, "biomoe-cli", "bf16"), tokens_per_s=100.0)]
    fill_ratios(recs)
    assert {r.case: r.contender for r in fastest_hf(recs).values()} == {
        "tiny@256": "hf-eager", "tiny@512": "hf-bf16-fused-compile"}
    cli, wide_cli = recs[4], recs[7]
    assert cli.fastest_hf == "hf-eager" and cli.ratio_vs_fastest_hf == pytest.approx(1.25)
    assert cli.ratio_vs_hf_bf16_fused == pytest.approx(1.5)
    assert wide_cli.fastest_hf == "hf-bf16-fused-compile" and wide_cli.ratio_vs_fastest_hf == pytest.approx(1.25)
    assert recs[2].ratio_vs_fastest_hf is None
    report = report_dict(recs, "python -m bench", {"gpu": "X"}, {}, {}, {})
    assert report["fastest_hf"] == {"tiny@256": "hf-eager", "tiny@512": "hf-bf16-fused-compile"}
    text = markdown(report)
    assert "Fastest HF configuration (the baseline): `hf-eager`." in text
    assert "| biomoe-cli | bf16 | 150 | — | 1 | 1.25× | 1.50× |" in text


def test_runs_of_a_row_combine_into_their_median_with_every_run_kept():
    row = Row(parse_case("tiny"), "biomoe-cli", "bf16")
    runs = [BenchRecord.for_row(row, tokens_per_s=t, step_ms=256 / t * 1e3, tflops=t / 100, mfu=t / 1e5,
                                peak_mem_gb=g, wall_s=2.0, losses=[t])
            for t, g in ((120.0, 1.0), (100.0, 3.0), (90.0, 2.0))]
    runs.insert(1, BenchRecord.for_row(row, status="error", error="boom", wall_s=1.0))
    combined = combine_runs(runs)
    assert combined.status == "ok" and combined.tokens_per_s == 100.0 and combined.losses == [100.0]
    assert combined.runs == [120.0, 100.0, 90.0] and combined.tokens_per_s_range == [90.0, 120.0]
    assert combined.peak_mem_gb == 3.0 and combined.wall_s == 7.0 and combined.tflops == 1.0
    assert combined.details["failed_runs"] == ["error: boom"]
    even = combine_runs(runs[2:])  # 100 and 90: the median between them, the slower run's timings
    assert even.tokens_per_s == 95.0 and even.losses == [90.0] and even.tflops == pytest.approx(0.95)
    only_failures = combine_runs([runs[1]])
    assert only_failures.status == "error" and only_failures.runs == []


def test_each_shape_trains_from_its_own_recipe_unless_one_config_is_given(tmp_path):
    assert shape_config(parse_case("genome"), None).name == "genome.yaml"
    assert shape_config(parse_case("dna-small"), None).name == "dna-small.yaml"
    assert shape_config(parse_case("mixtral-2layer"), None).name == "dna-small.yaml"
    assert shape_config(parse_case("genome"), tmp_path / "x.yaml") == tmp_path / "x.yaml"


def test_genome_tokens_are_windows_of_the_genome_and_the_same_every_time():
    from biomoe.data.sources.registry import open_reader
    from biomoe.data.tokenizer import NucleotideTokenizer

    fasta = ROOT / "data" / "lambda_virus.fa.gz"
    shape = parse_case("tiny")
    ids, labels = genome_tokens(shape, fasta, CPU)
    assert ids.shape == (shape.micro_batch, shape.seq) and torch.equal(ids[:, 1:], labels[:, :-1])
    assert torch.equal(genome_tokens(shape, fasta, CPU)[0], ids)
    text = NucleotideTokenizer().decode(torch.cat([ids[0], labels[0, -1:]]))
    genome = open_reader(fasta)
    whole = genome.fetch(genome.contigs[0].name, 0, genome.contigs[0].length).upper()
    assert text in whole
    with pytest.raises(ValueError, match="no contig is longer"):
        genome_tokens(shape.with_seq(60000, 1), fasta, CPU)


def test_throughput_is_the_median_step_with_model_flops():
    shape = parse_case("tiny")
    speed = throughput(shape, [30.0, 10.0, 20.0])
    assert speed.step_ms == 20.0
    assert speed.tokens_per_s == pytest.approx(shape.tokens_per_step / 0.02)
    assert speed.tflops == pytest.approx(shape.flops_per_step() / 0.02 / 1e12)
    assert speed.mfu == pytest.approx(speed.tflops / PEAK_BF16_TFLOPS)


def test_a_failing_row_becomes_a_record_with_its_message(tmp_path):
    """biomoe-loop with TE experts on a CPU cannot be built: recorded, not raised."""
    ctx = BenchContext(CPU, Path("configs/dna-small.yaml"), warmup=1, steps=1, loop_backend="te",
                       independent_init=True)
    record = measure(Row(parse_case("tiny"), "biomoe-loop", "bf16"), ctx)
    assert record.status == "error" and "te" in record.error and record.tokens_per_s is None


@pytest.mark.slow
def test_bench_runs_hf_the_bare_loop_and_the_product_path_and_writes_the_report(tmp_path):
    """The whole `make bench` flow on a CPU at the tiny shape (numbers meaningless, layout real)."""
    out = tmp_path / "bench"
    assert main(["--device", "cpu", "--shapes", "tiny", "--precisions", "bf16,fp8-block", "--warmup", "1",
                 "--steps", "2", "--repeats", "2", "--fasta", "data/lambda_virus.fa.gz", "--contenders",
                 "hf-bf16-fused,biomoe-loop,biomoe-cli,biomoe-cli-repeated,biomoe-cli-nocallbacks",
                 "--out", str(out)]) == 0
    report = json.loads((out / "bench.json").read_text())
    assert "6·N_active·tokens" in report["flop_formula"] and report["peak_tflops_for_mfu"] == 790.0
    assert report["command"].split()[1:3] == ["-m", "bench"]
    assert {"torch", "transformers", "transformer_engine", "gpu"} <= set(report["environment"])
    rows = {(r["contender"], r["precision"]): r for r in report["records"]}
    for key in [("hf-bf16-fused", "bf16"), ("biomoe-loop", "bf16"), ("biomoe-cli", "bf16"),
                ("biomoe-cli-repeated", "bf16"), ("biomoe-cli-nocallbacks", "bf16")]:
        r = rows[key]
        assert r["status"] == "ok", r
        assert len(r["runs"]) == 2 and r["tokens_per_s_range"][0] <= r["tokens_per_s"] <= r["tokens_per_s_range"][1]
        assert r["tokens_per_s"] > 0 and r["steps_timed"] == 2 and r["shape"] == "tiny"
        assert r["tokens_per_step"] == 256 and r["ratio_vs_hf_bf16_fused"] > 0
        # 1 + 2 + the drained and the counted step
        assert {"mfu", "tflops", "peak_mem_gb"} <= set(r) and len(r["losses"]) == 5
        assert r["host_ms"] > 0
    assert rows[("hf-bf16-fused", "bf16")]["ratio_vs_hf_bf16_fused"] == 1.0
    assert report["fastest_hf"] == {"tiny@256": "hf-bf16-fused"} and report["environment"]["date"]
    assert rows[("biomoe-cli", "bf16")]["fastest_hf"] == "hf-bf16-fused"
    shipped = rows[("biomoe-cli", "bf16")]["details"]
    assert {"NonFiniteGuard", "RouterCollapseMonitor", "ModelCheckpoint"} <= set(shipped["callbacks"])
    assert "cli.py fit --config=" in shipped["command"] and "--model.runtime.precision=bf16" in shipped["command"]
    assert ("GenomeDataModule on data/lambda_virus.fa.gz" in shipped["data"]
            and "--data.num_workers" not in shipped["command"])
    assert "repeated" in rows[("biomoe-cli-repeated", "bf16")]["details"]["data"]
    assert report["settings"]["repeats"] == 2 and "lambda_virus" in report["settings"]["fasta"]
    bare = rows[("biomoe-cli-nocallbacks", "bf16")]["details"]["callbacks"]
    assert not {"NonFiniteGuard", "RouterCollapseMonitor", "ModelCheckpoint"} & set(bare)
    for key in [("biomoe-loop", "fp8-block"), ("biomoe-cli", "fp8-block")]:
        assert rows[key]["status"] == "skipped" and "fp8-block" in rows[key]["error"]
    assert "fp8-block" in report["skipped_precisions"]
    text = (out / "bench.md").read_text()
    assert "| biomoe-cli | bf16 |" in text and "Not run here: biomoe-loop/fp8-block" in text
    assert (out / "bench.png").stat().st_size > 1000


@pytest.mark.slow
def test_a_product_row_ends_after_its_timed_steps_and_keeps_nothing_of_its_model_alive():
    """The next row's peak memory must not hold this row's model, fp32 masters or optimizer state
    (tens of GB at the Mixtral shape), and the fit ends at the last timed step."""
    import gc

    import lightning as L

    from bench.product import CLI_VARIANTS, DEFAULT_CONFIG, run_cli

    def alive() -> tuple[int, int, int]:
        gc.collect()
        objects = gc.get_objects()
        return (sum(isinstance(o, torch.optim.Optimizer) for o in objects),
                sum(isinstance(o, L.LightningModule) for o in objects),
                sum(isinstance(o, torch.nn.Parameter) for o in objects))

    before = alive()
    ids = torch.randint(4, 8, (2, 64))
    run = run_cli(DEFAULT_CONFIG, parse_case("tiny").with_seq(64, 2), "bf16", ids, ids.clone(), 1, 2,
                  CLI_VARIANTS["biomoe-cli"])
    assert len(run.losses) == 5 and len(run.step_ms) == 2 and run.host_ms > 0
    assert run.details["optimizer"] == "AdamWWithMasterWeights" and "setup_s" in run.details
    assert alive() == before
