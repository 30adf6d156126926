"""biomoe's nucleotide tokenizer and sampling defaults as Hugging Face files.

An exported folder has to be usable with ``AutoTokenizer`` + ``AutoModelForCausalLM`` alone, so
the tokenizer is rebuilt with the ``tokenizers`` library to give exactly the ids of
:class:`~biomoe.data.tokenizer.NucleotideTokenizer`: a WordLevel vocabulary holding biomoe's
tokens at biomoe's ids, a pre-tokenizer that makes every character one token (so positions stay
genome coordinates), lowercase folded to uppercase as training did (soft-masked repeats), anything
else ``<unk>``, and ``<bos>`` prepended because every training window starts with it.

The model's embedding table is padded past the 19 real tokens, and it never saw a window that
emits a special token or an ambiguity code. ``generation_config.json`` therefore suppresses every
id except A, C, G and T (the bases biomoe's own ``generate`` emits), so ``model.generate()``
writes DNA and stops at ``max_new_tokens``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from biomoe.data.tokenizer import BOS_ID, EOS_ID, IUPAC_AMBIGUITY, NUCLEOTIDES, PAD_ID, NucleotideTokenizer
from biomoe.files import write_bytes, write_text
from biomoe.inference.sampling import emitted_token_ids

__all__ = ["build_hf_tokenizer", "generation_config_text", "hf_generation_config", "tokenizer_files",
           "vocabulary_difference", "write_generation_config", "write_tokenizer"]

_PORTABLE_TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # the name transformers 4.x and 5.x both load


def build_hf_tokenizer(fold_lowercase: bool = True, model_max_length: int | None = None):
    """A ``PreTrainedTokenizerFast`` whose ids equal ``NucleotideTokenizer(fold_lowercase).encode(s, add_bos=True)``."""
    # optional dependencies
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    biomoe_tokens = NucleotideTokenizer(fold_lowercase=fold_lowercase).tokens
    tokenizer = Tokenizer(models.WordLevel({token: i for i, token in enumerate(biomoe_tokens)}, unk_token="<unk>"))
    if fold_lowercase:
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Replace(base.lower(), base) for base in NUCLEOTIDES + IUPAC_AMBIGUITY])
    # one token per character, whitespace included (biomoe reads it as <unk> too)
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS_ID)])
    tokenizer.decoder = decoders.Fuse()  # bases joined without spaces
    extra = {} if model_max_length is None else {"model_max_length": model_max_length}
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        padding_side="left",  # batched prompts for a decoder-only model end where generation starts
        **extra)


def tokenizer_files(fold_lowercase: bool = True, model_max_length: int | None = None,
                    scratch_dir: Path | None = None) -> dict[str, bytes]:
    """The tokenizer files of an exported folder, by name, as bytes (written by the caller, together
    with the rest of the folder). ``save_pretrained`` only writes plain files, so it writes into a
    scratch folder (in ``scratch_dir``, the export's folder: same disk) that is removed again."""
    tokenizer = build_hf_tokenizer(fold_lowercase, model_max_length)
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix=".tokenizer.", dir=scratch_dir) as scratch:
        tokenizer.save_pretrained(scratch)
        for path in sorted(Path(scratch).iterdir()):
            if not path.is_file():
                continue
            if path.name == "tokenizer_config.json":
                settings = json.loads(path.read_text())
                settings["tokenizer_class"] = _PORTABLE_TOKENIZER_CLASS
                files[path.name] = (json.dumps(settings, indent=2) + "\n").encode()
            else:
                files[path.name] = path.read_bytes()
    return files


def write_tokenizer(out: Path, fold_lowercase: bool = True, model_max_length: int | None = None) -> list[str]:
    """Write the tokenizer files into ``out`` (each one atomically); returns their names."""
    files = tokenizer_files(fold_lowercase, model_max_length, scratch_dir=out)
    for name, data in files.items():
        write_bytes(out / name, data)
    return list(files)


def vocabulary_difference(folder: Path, config: dict | None = None) -> str | None:
    """How a transformers folder's tokenizer differs from biomoe's (None when its ids are biomoe's).

    Weights trained on another vocabulary load without complaint but read DNA through the wrong
    ids, so an import says what differs: no tokenizer file, tokens at other ids, tokens biomoe does
    not have, or special-token ids in ``config.json`` other than biomoe's."""
    expected = {token: i for i, token in enumerate(NucleotideTokenizer().tokens)}
    path = folder / "tokenizer.json"
    if not path.is_file():
        return "it has no tokenizer.json, so its token ids cannot be checked against biomoe's"
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    except (OSError, ValueError, KeyError, TypeError):
        return "its tokenizer.json has no readable vocabulary (model.vocab)"
    if not isinstance(vocab, dict):
        return "its tokenizer.json vocabulary is not a token -> id table (not a WordLevel tokenizer)"
    moved = [f"{t!r} is {vocab[t]} (biomoe: {i})" for t, i in expected.items() if t in vocab and vocab[t] != i]
    missing = [t for t in expected if t not in vocab]
    extra = [t for t in vocab if t not in expected]
    parts = []
    if moved:
        parts.append("token ids differ: " + ", ".join(moved[:4]) + (" ..." if len(moved) > 4 else ""))
    if missing:
        parts.append(f"{len(missing)} of biomoe's tokens missing ({', '.join(map(repr, missing[:4]))}"
                     + (" ..." if len(missing) > 4 else "") + ")")
    if extra:
        parts.append(f"{len(extra)} tokens biomoe does not have ({', '.join(map(repr, extra[:4]))}"
                     + (" ..." if len(extra) > 4 else "") + ")")
    for key, ours in (("bos_token_id", BOS_ID), ("eos_token_id", EOS_ID), ("pad_token_id", PAD_ID)):
        theirs = (config or {}).get(key)
        if isinstance(theirs, int) and theirs != ours:
            parts.append(f"config.json {key} {theirs} (biomoe: {ours})")
    return "; ".join(parts) if parts else None


def hf_generation_config(vocab_size: int, max_new_tokens: int = 1024):
    """Sampling defaults: plain sampling from the model's distribution over A/C/G/T."""
    from transformers import GenerationConfig  # optional dependency

    allowed = set(emitted_token_ids())
    return GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
        suppress_tokens=[i for i in range(vocab_size) if i not in allowed])


def generation_config_text(vocab_size: int, max_new_tokens: int = 1024) -> str:
    return hf_generation_config(vocab_size, max_new_tokens).to_json_string()


def write_generation_config(out: Path, vocab_size: int, max_new_tokens: int = 1024) -> None:
    write_text(out / "generation_config.json", generation_config_text(vocab_size, max_new_tokens))
