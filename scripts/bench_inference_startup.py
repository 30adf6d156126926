"""Wall time of one inference command in a fresh process, against ``python -c "import torch"``.

    python scripts/bench_inference_startup.py                      # 5 runs of each, median
    python scripts/bench_inference_startup.py --compare /tmp/old   # also another checkout
    python scripts/bench_inference_startup.py --out results/startup/score-fasta-cpu.json

A user runs ``cli.py score-fasta RUN genome.fa`` as one command; on a tiny model the scoring
itself takes a fraction of a second, so the time is start-up: imports, checkpoint verification
and the model build. The script writes a tiny checkpoint and a 20 kb FASTA into a temporary
folder, then runs ``import torch`` and ``score-fasta`` on them in turn (interleaved, so that a
busy shared machine slows both alike) and reports the median wall and CPU (user + sys) seconds
and their ratio to ``import torch``. A second checkout (``--compare``) is timed in the same loop.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = """
import sys, numpy as np, torch
sys.path.insert(0, {root!r})
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
torch.manual_seed(0)
cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                  ffn_hidden_size=32)
model = MoETransformer(cfg)
torch.save({{"state_dict": {{"model." + k: v for k, v in model.state_dict().items()}},
            "hyper_parameters": {{"config": cfg}}, "datamodule_hyper_parameters": {{"seq_length": 1024}}}},
           {ckpt!r})
bases = "".join(np.array(list("ACGT"))[np.random.default_rng(1).integers(0, 4, 20_000)])
open({fasta!r}, "w").write(">chr1\\n" + "\\n".join(bases[i:i + 60] for i in range(0, len(bases), 60)) + "\\n")
"""


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one run (exit status 0 expected)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=5)
    parser.add_argument("--compare", type=Path, default=None, help="another checkout, timed in the same loop")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        ckpt, fasta = work / "tiny.ckpt", work / "genome.fa"
        subprocess.run([sys.executable, "-c", SETUP.format(root=str(ROOT), ckpt=str(ckpt), fasta=str(fasta))],
                       check=True)
        old = time.time() - 3600  # a checkpoint written an hour ago, as after a training run
        os.utime(ckpt, (old, old))
        env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}
        score = ["cli.py", "score-fasta", str(ckpt), str(fasta), "--out", str(work / "scores"), "--no-progress"]
        commands = {"python -c 'import torch'": ([sys.executable, "-c", "import torch"], ROOT),
                    "cli.py score-fasta": ([sys.executable, *score], ROOT)}
        if args.compare is not None:
            commands[f"cli.py score-fasta ({args.compare})"] = ([sys.executable, *score], args.compare)
        subprocess.run([sys.executable, *score], cwd=ROOT, env=env, capture_output=True)  # warm the file cache
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (command, cwd) in commands.items():
                (work / "scores.tsv").unlink(missing_ok=True)
                wall, cpu = timed(command, cwd, env)
                walls[name].append(round(wall, 3))
                cpus[name].append(round(cpu, 3))
    torch_name = "python -c 'import torch'"
    median_wall = {name: statistics.median(v) for name, v in walls.items()}
    median_cpu = {name: statistics.median(v) for name, v in cpus.items()}
    result = {
        "what": "wall seconds of one inference command in a fresh process (tiny checkpoint, 20 kb FASTA), "
                "against importing torch alone",
        "command": "python cli.py score-fasta tiny.ckpt genome.fa --out scores --no-progress",
        "measured_by": "python scripts/bench_inference_startup.py" + (f" --compare {args.compare}"
                                                                     if args.compare else ""),
        "runs": args.runs,
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "median_wall_s": median_wall,
        "median_cpu_s": median_cpu,
        "ratio_to_import_torch_wall": {k: round(v / median_wall[torch_name], 2) for k, v in median_wall.items()},
        "wall_s": walls,
        "cpu_s": cpus,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
