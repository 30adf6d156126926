"""Do the experts pay? MoE against the dense model of equal active parameters, on a corpus.

Every contender is a real ``cli.py fit`` of ``configs/corpus-study.yaml`` with only the model changed,
so all read the same rows in the same order with the same schedule. They run **side by side** on one
GPU (a machine holds several of these networks at once): same tokens, and the wall clock of one
shared device. The held-out strains and species are validation files, so every validation logs
their bits/base per genome: the learning curves that the report groups by the corpus split
(seen species = the last 1 % of every training genome; held-out strains; held-out species).

    python -m bench.experts subset data/large/corpus data/corpus-splits.tsv /tmp/corpus-subset \
        --train-bases 2000000 --heldout-bases 400000
    python cli.py prepare /tmp/corpus-subset --splits data/corpus-splits.tsv --out /tmp/subset.store
    python -m bench.experts run --data /tmp/subset.store --sizes base --variants moe,dense,top1,fine,auxfree \
        --steps 1500 --out runs/experts
    python -m bench.experts report runs/experts --splits data/corpus-splits.tsv --out results/experts

``speed`` times each model alone (:mod:`bench.expert_speed`); ``match`` trains one model on other
expert kernels side by side and compares the loss curves (:mod:`bench.expert_match`).

Variants are the ones the MoE literature says make experts pay, each at equal active parameters
per token: ``top1`` (one expert of twice the width, Switch), ``fine`` (4x as many experts of a
quarter the width, top-8, DeepSeekMoE's fine-grained experts; ``fine64``: 8x as many), ``auxfree`` (DeepSeek-V3's
bias-based balancing instead of the auxiliary loss), ``shared`` (one routed expert beside a shared
expert every token passes through, DeepSeekMoE's shared-expert isolation).
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from biomoe.data.sources.corpus_records import read_records
from biomoe.data.sources.corpus_splits import read_splits
from biomoe.errors import GenomeInputError
from biomoe.files import write_text
from biomoe.output_checks import check_outputs

from bench.expert_contenders import contender_args
from bench.expert_curves import PowerLaw, crossover, fit_power_law

# -- the subset that travels ----------------------------------------------------------------------
def _wrap(seq: str, width: int = 80) -> str:
    return "\n".join(seq[i:i + width] for i in range(0, len(seq), width))


def subset_file(path: Path, held_out: bool, train_bases: int, heldout_bases: int, piece: int = 32768) -> str:
    """FASTA text of one file's share: a training genome's first ``train_bases`` (records in order,
    the last one cut), or a held-out genome's ``heldout_bases`` as evenly spaced pieces (so a
    genome's score is not that of its first replichore alone)."""
    records = list(read_records(path))
    if not held_out:
        out, left = [], train_bases
        for name, seq in records:
            if left <= 0:
                break
            out.append(f">{name}\n{_wrap(seq[:left])}")
            left -= min(len(seq), left)
        return "\n".join(out) + "\n"
    total = sum(len(s) for _, s in records)
    n_pieces = max(1, min(heldout_bases // piece, total // piece))
    starts = np.linspace(0, max(total - piece, 0), n_pieces).astype(np.int64)
    offsets = np.cumsum([0] + [len(s) for _, s in records])
    out = []
    for start in starts:
        i = int(np.searchsorted(offsets, start, side="right") - 1)
        name, seq = records[i]
        lo = int(start - offsets[i])
        chunk = seq[lo:lo + piece]
        if chunk:
            out.append(f">{name.split()[0]}:{lo + 1}-{lo + len(chunk)}\n{_wrap(chunk)}")
    return "\n".join(out) + "\n"


def subset(args: argparse.Namespace) -> int:
    splits = read_splits(args.splits)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, (name, split) in enumerate(sorted(splits.items())):
        src = Path(args.corpus) / name
        if not src.exists():
            print(f"biomoe: error: {src}: listed in {args.splits} but missing (run make data-corpus)", file=sys.stderr)
            return 2
        write_text(out / name, subset_file(src, split != "train", args.train_bases, args.heldout_bases))
        print(f"[{i + 1}/{len(splits)}] {name} ({split})", file=sys.stderr, flush=True)
    return 0


# -- running the contenders side by side -------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    procs: dict[str, tuple[subprocess.Popen, float]] = {}
    for size in args.sizes.split(","):
        for variant in args.variants.split(","):
            name = f"{size}-{variant}"
            cmd = contender_args(size, variant, args.data, args.steps, args.evaluations, out / name, args.extra)
            write_text(out / name / "command.txt", " ".join(cmd[1:]) + "\n")
            log = (out / name / "fit.log").open("w")
            procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.perf_counter())
            print(f"started {name}", file=sys.stderr, flush=True)
    deadline = time.perf_counter() + args.time_limit if args.time_limit else None
    while deadline is not None and any(p.poll() is None for p, _ in procs.values()):
        if time.perf_counter() > deadline:
            # SIGTERM: each fit finishes its step, saves last.ckpt and exits; the curves so far stay.
            print(f"time limit {args.time_limit:.0f} s: stopping the fits still running", file=sys.stderr, flush=True)
            for p, _ in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            break
        time.sleep(1.0)
    failed = 0
    for name, (proc, started) in procs.items():
        code = proc.wait()
        wall = time.perf_counter() - started
        write_text(out / name / "wall.json", json.dumps({"wall_s": wall, "exit": code}) + "\n")
        print(f"{name}: exit {code} after {wall:.0f} s", file=sys.stderr, flush=True)
        failed += code not in (0, 143)  # 143: stopped at the time limit, curves kept
    return 1 if failed else 0


# -- the report -------------------------------------------------------------------------------
GROUPS = {"train": "seen species", "heldout-strain": "held-out strains", "heldout-species": "held-out species"}
HELD_OUT = ("held-out strains", "held-out species")


@dataclass
class Contender:
    name: str
    tokens_per_step: int
    curve: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # group -> [(tokens, bits/base)]
    tokens_per_s: float | None = None
    wall_s: float | None = None
    final: dict[str, float] = field(default_factory=dict)
    seconds: list[tuple[int, float]] = field(default_factory=list)
    """(tokens, training seconds so far) at each validation: the fit's own ``train/seconds`` (its GPU
    time with validation left out, across resumed parts); empty for runs that did not log it."""


def _label(file_name: str) -> str:
    for suffix in (".gz", ".fa", ".fna", ".fasta"):
        file_name = file_name.removesuffix(suffix)
    return file_name


class NoCurve(Exception):
    """A contender whose fit never logged a validation (it failed to start or stopped first)."""


def _last_line(log: Path) -> str:
    """The fit's last output line: why a contender has no curve."""
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1][:300] if lines else "no fit.log"


def read_contender(run_dir: Path, splits: dict[str, str]) -> Contender:
    """Per-group mean of the per-genome validation bits/base (each genome counts once) at every validation."""
    command = (run_dir / "command.txt").read_text().split()
    value = {command[i]: command[i + 1] for i in range(len(command) - 1) if command[i].startswith("--")}
    metrics = sorted(run_dir.glob("version_*/metrics.csv"), key=_version_number)
    if not metrics:
        raise NoCurve(f"{run_dir.name}: no metrics ({_last_line(run_dir / 'fit.log')})")
    label_split = {_label(f): s for f, s in splits.items()}
    rows = _resumed_rows(metrics)
    c = Contender(run_dir.name, 0)
    speeds = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
    c.tokens_per_s = statistics.median(speeds[len(speeds) // 4:]) if speeds else None
    wall = run_dir / "wall.json"
    c.wall_s = json.loads(wall.read_text())["wall_s"] if wall.exists() else None
    batch, seq = _data_shape(run_dir, value)
    c.tokens_per_step = batch * seq
    for r in rows:
        per_group: dict[str, list[float]] = {}
        for key, text in r.items():
            if text and key.startswith("val/") and key.endswith("/bits_per_base") and key.count("/") == 2:
                split = label_split.get(key.split("/")[1])
                if split in GROUPS:
                    per_group.setdefault(GROUPS[split], []).append(float(text))
        if per_group and r.get("step"):
            tokens = (int(r["step"]) + 1) * c.tokens_per_step
            for group, values in per_group.items():
                c.curve.setdefault(group, []).append((tokens, float(np.mean(values))))
            trained = [float(t["train/seconds"]) for t in rows
                       if t.get("train/seconds") and t.get("step") and int(t["step"]) <= int(r["step"])]
            if trained:
                c.seconds.append((tokens, trained[-1]))
    c.final = {group: points[-1][1] for group, points in c.curve.items()}
    return c


def _version_number(path: Path) -> int:
    try:
        return int(path.parent.name.removeprefix("version_"))
    except ValueError:
        return -1


def _resumed_rows(metrics: list[Path]) -> list[dict[str, str]]:
    """The rows of every part of a run (a resumed fit logs into a new version folder), in order; a
    step logged again by a later part (the steps after its checkpoint) keeps the later part's rows."""
    rows: list[dict[str, str]] = []
    for path in metrics:
        part = list(csv.DictReader(path.open()))
        steps = [int(r["step"]) for r in part if r.get("step")]
        if steps:
            rows = [r for r in rows if not r.get("step") or int(r["step"]) < min(steps)]
        rows += part
    return rows


def seconds_at(c: Contender, tokens: int) -> float | None:
    """Training seconds at the validation of ``tokens`` (None where the run logged none)."""
    return next((s for t, s in c.seconds if t == tokens), None)


def _data_shape(run_dir: Path, value: dict[str, str]) -> tuple[int, int]:
    """(batch_size, seq_length) the run used, from the config the run recorded."""
    import yaml

    for saved in sorted(run_dir.glob("version_*/config.yaml")):
        data = yaml.safe_load(saved.read_text()).get("data", {})
        return int(data["batch_size"]), int(data["seq_length"])
    return int(value.get("--data.batch_size", 64)), int(value.get("--data.seq_length", 1024))


def at_tokens(c: Contender, group: str, tokens: int) -> float | None:
    """The group's bits/base at the validation nearest below ``tokens`` (None before the first)."""
    points = [p for p in c.curve.get(group, []) if p[0] <= tokens]
    return points[-1][1] if points else None


def tokens_to_reach(c: Contender, group: str, target: float) -> int | None:
    """Tokens at the first validation where the group's bits/base is at or below ``target``."""
    return next((t for t, v in c.curve.get(group, []) if v <= target), None)


def _bits(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def markdown(contenders: list[Contender], command: str) -> str:
    """Held-out bits/base at the largest token count every contender reached (equal tokens), and how
    soon each reaches the dense model's bits/base there."""
    groups = list(GROUPS.values())
    reached = [max((p[0] for pts in c.curve.values() for p in pts), default=0) for c in contenders]
    common = min(reached) if reached else 0
    dense = next((c for c in contenders if c.name.endswith("dense")), None)
    lines = [f"Held-out bits/base after {common / 1e6:.1f}M training tokens (every contender's validation at that "
             "point; mean over the genomes of each group), the tokens and the training GPU time (the fit's own "
             "train/seconds, validation left out) each needed to reach the dense model's bits/base there (as a "
             "multiple of what the dense model itself needed to first reach it; – where the model never does), "
             "its training tokens/s and wall time.", "",
             "| model | " + " | ".join(groups) + " | tokens to dense's (held-out strains / species) | "
             "GPU time to dense's (strains / species) | tokens/s | wall |",
             "| --- | " + " | ".join("---:" for _ in groups) + " | ---: | ---: | ---: | ---: |"]
    for c in contenders:
        cells = [_bits(at_tokens(c, g, common)) for g in groups]
        ratios, gpu = [], []
        for g in HELD_OUT:
            target = at_tokens(dense, g, common) if dense is not None else None
            tokens, seconds = cost_ratios(c, dense, g, target)
            ratios.append(tokens)
            gpu.append(seconds)
        speed = f"{c.tokens_per_s / 1e3:.0f}k" if c.tokens_per_s else "–"
        wall = f"{c.wall_s:.0f} s" if c.wall_s else "–"
        lines.append(f"| {c.name} | " + " | ".join(cells) + f" | {' / '.join(ratios)} | {' / '.join(gpu)} | "
                     f"{speed} | {wall} |")
    lines += ["", "At each run's last validation (runs stopped by the time limit end earlier):", "",
              "| model | tokens | " + " | ".join(groups) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in groups) + " |"]
    for c in contenders:
        last = max((p[0] for pts in c.curve.values() for p in pts), default=0)
        cells = [_bits(at_tokens(c, g, last)) for g in groups]
        lines.append(f"| {c.name} | {last / 1e6:.1f}M | " + " | ".join(cells) + " |")
    lines += best_markdown(contenders, dense) + overfitting_markdown(contenders)
    lines += fits_markdown(contenders, dense)
    return "\n".join(lines) + f"\n\n```bash\n{command}\n```\n"


def cost_ratios(c: Contender, dense: Contender | None, group: str, target: float | None) -> tuple[str, str]:
    """Tokens and training GPU time ``c`` needs to first reach ``target``, as multiples of what the dense
    model needed to first reach it ("–" where either never does or the time was not logged)."""
    if dense is None or target is None:
        return "–", "–"
    mine, theirs = tokens_to_reach(c, group, target), tokens_to_reach(dense, group, target)
    if mine is None or not theirs:
        return "–", "–"
    my_s, their_s = seconds_at(c, mine), seconds_at(dense, theirs)
    return f"{mine / theirs:.2f}x", ("–" if my_s is None or not their_s else f"{my_s / their_s:.2f}x")


def best(c: Contender, group: str) -> tuple[int, float] | None:
    """(tokens, bits/base) of the group's lowest validation, the first one where values tie."""
    points = c.curve.get(group, [])
    return min(points, key=lambda p: (p[1], p[0])) if points else None


def best_markdown(contenders: list[Contender], dense: Contender | None) -> list[str]:
    """Each model's lowest held-out bits/base over the run, and the cost of reaching the dense model's
    lowest: the comparison that holds when a curve turns up again (a run that repeats its data)."""
    lines = ["", "Lowest held-out bits/base of each run (at the tokens where it was reached), and the tokens and "
             "training GPU time each model needs to reach the dense model's lowest, as multiples of the dense "
             "model's own:", "",
             "| model | held-out strains (at) | held-out species (at) | tokens to dense's lowest (strains / species) "
             "| GPU time to dense's lowest (strains / species) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for c in contenders:
        cells, ratios, gpu = [], [], []
        for g in HELD_OUT:
            mine = best(c, g)
            cells.append("–" if mine is None else f"{mine[1]:.4f} ({mine[0] / 1e6:.0f}M)")
            theirs = best(dense, g) if dense is not None else None
            tokens, seconds = cost_ratios(c, dense, g, theirs[1] if theirs else None)
            ratios.append(tokens)
            gpu.append(seconds)
        lines.append(f"| {c.name} | " + " | ".join(cells) + f" | {' / '.join(ratios)} | {' / '.join(gpu)} |")
    return lines


OVERFIT_TOLERANCE = 0.002
"""Bits/base by which a curve's last validation may exceed its lowest before the report calls it rising."""


def overfitting_markdown(contenders: list[Contender]) -> list[str]:
    """Curves whose last validation is above their lowest: past that point the model learns the
    training genomes rather than DNA (seen species are held-out windows of the training genomes)."""
    rising = []
    for c in contenders:
        for group in GROUPS.values():
            low, points = best(c, group), c.curve.get(group, [])
            if low is not None and points[-1][1] > low[1] + OVERFIT_TOLERANCE:
                rising.append(f"{c.name} {group}: {low[1]:.4f} at {low[0] / 1e6:.0f}M tokens, "
                              f"{points[-1][1]:.4f} at {points[-1][0] / 1e6:.0f}M")
    if not rising:
        return []
    return ["", "Curves that rose again after their lowest point (by more than "
            f"{OVERFIT_TOLERANCE} bits/base; the model memorises its training genomes once the run repeats "
            "them, and the power-law fits below use each curve only up to its lowest point):", ""] + \
        [f"- {line}" for line in rising]


def fits(c: Contender) -> dict[str, PowerLaw]:
    """The held-out groups' power-law fits of one contender (groups with too few points left out)."""
    out = {}
    for group in HELD_OUT:
        points = c.curve.get(group, [])
        low = best(c, group)
        points = [p for p in points if low is not None and p[0] <= low[0]]  # the falling part only
        law = fit_power_law([t for t, _ in points], [b for _, b in points])
        if law is not None:
            out[group] = law
    return out


def training_rate(c: Contender) -> float | None:
    """Tokens per training second over the whole run (its last validation's tokens / train/seconds)."""
    if c.seconds and c.seconds[-1][1] > 0:
        return c.seconds[-1][0] / c.seconds[-1][1]
    return c.tokens_per_s


def fits_markdown(contenders: list[Contender], dense: Contender | None) -> list[str]:
    """``L(T) = E + A·T^-α`` per contender and held-out group, and the projected crossover with dense."""
    lines = ["", "Power-law fits of held-out bits/base against training tokens, L(T) = E + A·T^-α (validations "
             "after the first), and where each MoE's fitted curve falls below the dense model's: in tokens, "
             "and in training GPU seconds at each model's own tokens/s (beyond the measured tokens this is a "
             "projection):", "",
             "| model | group | E | A | α | rmse | points | crossover tokens | crossover GPU time |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    dense_fits = fits(dense) if dense is not None else {}
    dense_rate = training_rate(dense) if dense is not None else None
    unfitted = []
    for c in contenders:
        rate = training_rate(c)
        found_fits = fits(c)
        unfitted += [f"{c.name} {g}" for g in HELD_OUT if g in c.curve and g not in found_fits]
        for group, law in found_fits.items():
            cross_t = cross_s = "–"
            other = dense_fits.get(group)
            if other is not None and c is not dense:
                start = min(t for t, _ in c.curve[group])
                found = crossover(law, other, start)
                cross_t = "none below 1e15" if found is None else f"{found / 1e6:,.0f}M"
                if rate and dense_rate:
                    found_s = crossover(law, other, start / rate, moe_rate=rate, dense_rate=dense_rate)
                    cross_s = "none" if found_s is None else f"{found_s / 3600:,.2f} h"
            lines.append(f"| {c.name} | {group} | {law.E:.4f} | {law.A:.4g} | {law.alpha:.3f} | {law.rmse:.5f} | "
                         f"{law.points} | {cross_t} | {cross_s} |")
    if unfitted:
        lines += ["", "No power law fits (fewer than four falling points after the first, a floor E below zero or "
                  "an exponent at the edge of the grid searched): " + "; ".join(unfitted) + ". One learning-rate "
                  "schedule's curve is not a scaling law: its late drop is the schedule's decay."]
    return lines


def plot(contenders: list[Contender], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(GROUPS.values())
    timed = any(c.seconds for c in contenders)
    rows = 2 if timed else 1
    fig, axes = plt.subplots(rows, len(groups), figsize=(5 * len(groups), 4 * rows), squeeze=False)
    for col, group in enumerate(groups):
        for c in contenders:
            pts = c.curve.get(group)
            if not pts:
                continue
            style = "--" if "dense" in c.name else "-"
            line, = axes[0][col].plot([p[0] / 1e6 for p in pts], [p[1] for p in pts], style, marker=".",
                                      label=c.name)
            low = best(c, group)  # a curve that turns up again: where it was lowest
            if low is not None and pts[-1][1] > low[1] + OVERFIT_TOLERANCE:
                axes[0][col].plot([low[0] / 1e6], [low[1]], marker="v", ms=9, color=line.get_color())
            seconds = dict(c.seconds)
            timed_pts = [(seconds[t], b) for t, b in pts if t in seconds]
            if timed and timed_pts:
                axes[1][col].plot([s / 60 for s, _ in timed_pts], [b for _, b in timed_pts], style, marker=".",
                                  label=c.name)
        axes[0][col].set_title(group)
        axes[0][col].set_xlabel("training tokens (millions)")
        if timed:
            axes[1][col].set_xlabel("training GPU time, each model alone (minutes)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("bits/base")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def contenders_in(summary: dict) -> list[Contender]:
    """The contenders of a report's parsed summary.json."""
    return [Contender(c["name"], int(c["tokens_per_step"]),
                      {g: [(int(t), float(b)) for t, b in pts] for g, pts in c["curve"].items()},
                      c.get("tokens_per_s"), c.get("wall_s"), dict(c.get("final", {})),
                      [(int(t), float(s)) for t, s in c.get("seconds", [])])
            for c in summary["contenders"]]


def contenders_from_summary(path: Path) -> tuple[list[Contender], list[str], dict]:
    """The contenders a report recorded in its summary.json, to render that report again."""
    try:
        summary = json.loads(path.read_text())
        contenders = contenders_in(summary)
    except (OSError, ValueError, KeyError, TypeError) as why:
        raise NoCurve(f"{path}: not a report summary ({why})") from None
    return contenders, list(summary.get("without_curve", [])), summary


def contenders_of(source: Path, splits_file: str) -> tuple[list[Contender], list[str], dict]:
    """(contenders, why others have no curve, what a summary recorded) of a runs folder or of a
    report's summary.json."""
    if source.is_file():
        return contenders_from_summary(source)
    if not source.is_dir():
        raise NoCurve(f"{source}: neither a runs folder nor a report's summary.json")
    found, missing, splits = [], [], read_splits(splits_file)
    for run_dir in sorted(p for p in source.iterdir() if (p / "command.txt").exists()):
        try:
            found.append(read_contender(run_dir, splits))
        except NoCurve as why:  # reported beside the others, not instead of them
            missing.append(str(why))
            print(f"biomoe: warning: {why}", file=sys.stderr)
    return found, missing, {}


def report(args: argparse.Namespace) -> int:
    contenders: list[Contender] = []
    missing: list[str] = []
    commands: list[str] = []
    machine = ""
    out = Path(args.out)
    sources = [Path(s) for s in args.runs]
    out.mkdir(parents=True, exist_ok=True)
    try:  # a summary given again is an input: never written over
        check_outputs([out / "summary.json", out / "summary.md", out / "curves.png"],
                      [s for s in sources if s.is_file()])
    except (GenomeInputError, OSError) as why:
        print(f"biomoe: error: {why}", file=sys.stderr)
        return 2
    for source in sources:
        try:
            found, gone, recorded = contenders_of(source, args.splits)
        except NoCurve as why:
            print(f"biomoe: error: {why}", file=sys.stderr)
            return 2
        missing += gone
        commands.append(recorded.get("command", ""))
        machine = machine or recorded.get("machine", "")
        names = {c.name for c in found}  # a contender run again replaces its earlier curve
        contenders = [c for c in contenders if c.name not in names] + found
    if not contenders:
        print(f"biomoe: error: {' '.join(args.runs)}: no contender logged a validation", file=sys.stderr)
        return 2
    args.machine = args.machine or machine
    command = args.command or "\n".join(c for c in commands if c) or \
        " ".join(["python -m bench.experts report", *args.runs])
    write_text(out / "summary.json", json.dumps({"command": command, "machine": args.machine,
                                                 "contenders": [asdict(c) for c in contenders],
                                                 "without_curve": missing}, indent=1) + "\n")
    text = (f"Machine: {args.machine}\n\n" if args.machine else "") + markdown(contenders, command)
    if missing:
        text += "\nNo curve: " + "; ".join(missing) + "\n"
    write_text(out / "summary.md", text)
    plot(contenders, out / "curves.png")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experts", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("subset", help="a species-balanced subset of the corpus, as FASTA")
    s.add_argument("corpus")
    s.add_argument("splits")
    s.add_argument("out")
    s.add_argument("--train-bases", type=int, default=2_000_000, help="at most this many bases per training genome")
    s.add_argument("--heldout-bases", type=int, default=400_000, help="bases per held-out genome, evenly spaced pieces")
    r = sub.add_parser("run", help="every size x variant as cli.py fit, side by side")
    r.add_argument("--data", required=True, help="the prepared store (or FASTA folder) to train and validate on")
    r.add_argument("--sizes", default="base")
    r.add_argument("--variants", default="moe,dense")
    r.add_argument("--steps", type=int, default=1500)
    r.add_argument("--evaluations", type=int, default=6)
    r.add_argument("--out", required=True)
    r.add_argument("--time-limit", type=float, default=0.0,
                   help="seconds after which every fit still running is stopped by SIGTERM (0: none)")
    r.add_argument("extra", nargs="*", help="more cli.py fit options for every contender (after --)")
    p = sub.add_parser("report", help="tables and curves from the runs")
    p.add_argument("runs", nargs="+", help="runs folders, or reports' summary.json files to render again, "
                   "together (a contender found again replaces the earlier one)")
    p.add_argument("--splits", default="data/corpus-splits.tsv")
    p.add_argument("--out", required=True)
    p.add_argument("--command", default="", help="the command line to record in the summary")
    p.add_argument("--machine", default="", help="the machine the runs ran on, to record in the summary")
    from bench import expert_match, expert_speed, expert_study

    expert_speed.add_parser(sub)
    expert_study.add_parser(sub)
    expert_match.add_parser(sub)
    args = parser.parse_args(argv)
    return {"subset": subset, "run": run, "report": report, "speed": expert_speed.speed,
            "study": expert_study.study, "match": expert_match.match}[args.what](args)


if __name__ == "__main__":
    raise SystemExit(main())
