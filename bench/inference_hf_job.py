"""One Hugging Face job in its own process: the baseline of an inference row as a user would run it.

``python -m bench.inference_hf_job score-fasta --export HF_DIR --fasta G.fa --out result.json``
imports torch and transformers, loads ``MixtralForCausalLM`` with ``from_pretrained``, does the job
(:mod:`bench.inference_hf`) and writes its result: the process's whole wall time is what the
bench compares with ``python cli.py score-fasta ...`` in a fresh process. The JSON holds the work
done, the job's time after the model was on the device (``compute_seconds``) and what it computed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["main"]

JOBS = ("score-fasta", "embed", "score-variants", "generate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inference_hf_job", description=__doc__.split("\n")[0])
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--export", type=Path, required=True, help="the HF folder export-hf wrote")
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")
    parser.add_argument("--fasta", type=Path)
    parser.add_argument("--variants", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--batch-tokens", type=int, default=65536)
    parser.add_argument("--pool-size", type=int, default=1000)
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument("--length", type=int, default=1000)
    args = parser.parse_args(argv)

    import torch

    from bench import inference_hf as hf
    from biomoe.files import write_text

    device = torch.device(args.device)
    if args.job == "score-fasta":
        run = hf.hf_score_fasta(args.export, args.fasta, device, args.window, args.batch_tokens)
    elif args.job == "embed":
        run = hf.hf_embed(args.export, args.fasta, device, args.window, args.batch_tokens, args.pool_size)
    elif args.job == "score-variants":
        run = hf.hf_score_variants(args.export, args.fasta, args.variants, device, args.window, args.batch_tokens)
    else:
        generator = hf.HFGenerator(args.export, device)
        run = hf.hf_generate(generator, args.num_samples, args.length)
        run.details.pop("held_bytes", None)
    write_text(args.out, json.dumps({"job": args.job, "in_process_seconds": run.seconds,
                                     "compute_seconds": run.compute_seconds, "work": run.work,
                                     "first_batch_seconds": run.first_seconds, "first_batch_work": run.first_work,
                                     "details": run.details}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
