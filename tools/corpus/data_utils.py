"""Synthetic text data, a byte-level toy tokenizer and token-budget packing.

Shared by the training scripts (copied next to them into the run's workspace) and by
``generate.py``, which uses the same packing to place a bad record exactly at the step
where a scenario needs it. Pure Python: no torch import, so the generator stays light.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

VOCAB = 256
EOS = 2
#: token ids 0..3 are special; bytes are folded into the rest of the vocabulary
_FIRST_BYTE_ID = 4

_WORDS = [
    "the",
    "of",
    "and",
    "in",
    "to",
    "a",
    "was",
    "is",
    "for",
    "on",
    "as",
    "by",
    "with",
    "he",
    "at",
    "from",
    "his",
    "that",
    "it",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "first",
    "its",
    "also",
    "had",
    "has",
    "new",
    "their",
    "after",
    "one",
    "two",
    "who",
    "but",
    "not",
    "they",
    "or",
    "her",
    "she",
    "been",
    "game",
    "season",
    "album",
    "song",
    "river",
    "city",
    "war",
    "film",
    "team",
    "series",
    "school",
    "county",
    "church",
    "station",
    "village",
]


def tokenize(text: str) -> list[int]:
    """Byte-level toy tokenizer: one token per UTF-8 byte, then EOS."""
    return [b % (VOCAB - _FIRST_BYTE_ID) + _FIRST_BYTE_ID for b in text.encode()] + [EOS]


@dataclass
class Batch:
    """One packed micro-batch of ``seq_len + 1`` tokens (inputs and shifted labels)."""

    tokens: list[int]
    weights: list[float]
    code: list[bool]
    doc_ids: list[int] = field(default_factory=list)


def iter_shard(path: str | Path, rank: int, world: int) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_no, record)`` for the lines of ``path`` that belong to ``rank`` (i % world)."""
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % world == rank:
                yield i, json.loads(line)


def packed_batches(records: Iterator[tuple[int, dict]], seq_len: int) -> Iterator[Batch]:
    """Pack records into fixed ``seq_len + 1`` token chunks; the partial tail is dropped.

    Records are tokenized lazily, one at a time, like a streaming dataset, so a bad record
    raises at the step that consumes it and not when the dataset is opened.
    """
    tokens: list[int] = []
    weights: list[float] = []
    code: list[bool] = []
    docs: list[int] = []
    need = seq_len + 1
    for line_no, rec in records:
        # pre-tokenized records are used as they are (mixed corpora have both kinds)
        ids = list(rec["input_ids"]) if "input_ids" in rec else tokenize(rec["text"])
        scale = float(rec.get("loss_scale", 1.0))
        is_code = rec.get("source") == "code"
        tokens.extend(ids)
        weights.extend([scale] * len(ids))
        code.extend([is_code] * len(ids))
        docs.extend([line_no] * len(ids))
        while len(tokens) >= need:
            yield Batch(tokens[:need], weights[:need], code[:need], sorted(set(docs[:need])))
            del tokens[:need], weights[:need], code[:need], docs[:need]
    # drop_last: whatever is left is shorter than one micro-batch and is discarded


def synth_records(n: int, seed: int) -> list[dict]:
    """Wikitext-like lines: about a third empty, many short headings, a few long paragraphs."""
    rng = random.Random(seed)
    out: list[dict] = []
    for _ in range(n):
        u = rng.random()
        if u < 0.35:
            text = ""
        elif u < 0.55:
            text = " = " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3))) + " = "
        else:
            n_words = max(3, int(rng.lognormvariate(3.0, 0.6)))
            text = " ".join(rng.choice(_WORDS) for _ in range(n_words)) + " ."
        out.append({"text": text})
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Write records one JSON object per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def batches_per_rank(records: list[dict], world: int, seq_len: int) -> list[list[Batch]]:
    """The packed batches each rank would see for ``records`` sharded ``i % world``."""
    out: list[list[Batch]] = []
    for r in range(world):
        shard = ((i, rec) for i, rec in enumerate(records) if i % world == r)
        out.append(list(packed_batches(shard, seq_len)))
    return out


def doc_starting_in_batch(records: list[dict], world: int, rank: int, step: int, seq_len: int) -> int:
    """Index of a non-empty record of ``rank``'s shard whose first token falls in batch ``step``.

    The packer reads such a record while it builds that batch, so a bad record placed there
    breaks the job exactly at training step ``step`` (1-based).
    """
    pos = 0
    lo, hi = (step - 1) * (seq_len + 1), step * (seq_len + 1)
    for i, rec in enumerate(records):
        if i % world != rank:
            continue
        n = len(tokenize(rec["text"]))
        if lo <= pos < hi - 1 and rec["text"]:  # at least one input token inside the batch
            return i
        pos += n
    raise ValueError(f"rank {rank} has no record starting in batch {step}")


def pack_greedy(token_lists: list[list[int]], max_length: int) -> list[list[int]]:
    """Pack whole samples (truncated to ``max_length``) into sequences of at most ``max_length``."""
    out: list[list[int]] = []
    cur: list[int] = []
    for ids in token_lists:
        ids = ids[:max_length]  # truncation_strategy right
        if cur and len(cur) + len(ids) > max_length:
            out.append(cur)
            cur = []
        cur = cur + ids
    if cur:
        out.append(cur)
    return out


def node_split(
    records: list[dict], nnodes: int, node_rank: int, max_length: int, ratio: float, seed: int = 42
) -> tuple[list[list[int]], list[list[int]]]:
    """What one node of the ms-swift-like script trains and evaluates on.

    Each node reads its own slice of the jsonl (line ``i`` goes to node ``i % nnodes``),
    shuffles it, packs it and splits ``ceil(ratio * n)`` packed sequences off for evaluation.
    The split is therefore made per node: two nodes can end up with different eval sizes.
    """
    lines = records[node_rank::nnodes]
    order = list(range(len(lines)))
    random.Random(seed).shuffle(order)
    packed = pack_greedy([tokenize(lines[i]["text"]) for i in order], max_length)
    n_val = math.ceil(ratio * len(packed))
    return packed[: len(packed) - n_val], packed[len(packed) - n_val :]
