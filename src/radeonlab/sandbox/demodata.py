"""The demo's dataset: a small, deterministic alpaca set teaching one easy skill (uppercase a word).

Writes `<out>/demo.jsonl` (JSON Lines, one alpaca row per line) and `<out>/dataset_info.json` (LLaMA-Factory's
dataset registry, naming it `demo`). The task is trivial on purpose: a tiny random model learns it in a few
dozen CPU steps, so a falling loss is visible in seconds.

    python -m radeonlab.sandbox.demodata OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATASET_NAME = "demo"
FILE_NAME = "demo.jsonl"
ROWS = 200
SEED = 20240611
INSTRUCTION = "Uppercase the word."
# Short, common, all-lowercase ASCII words: the tokenizer is trained on exactly this text.
WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "acorn anchor badge basket candle canyon carrot copper desert dollar donkey engine falcon forest garden "
    "ginger hammer harbor island jacket kettle ladder lantern lizard magnet marble meadow mirror nickel "
    "orange oyster pebble pepper pillow planet pocket puzzle rabbit ribbon rocket saddle shadow silver "
    "spider summer tunnel turtle velvet violin walnut window winter yellow zipper"
).split()
DATASET_INFO = {
    DATASET_NAME: {
        "file_name": FILE_NAME,
        "formatting": "alpaca",
        "columns": {"prompt": "instruction", "query": "input", "response": "output"},
    }
}


def rows(n: int = ROWS, seed: int = SEED) -> list[dict[str, str]]:
    """`n` rows drawn with a fixed seed: the same list on every machine and Python 3.x."""
    rng = random.Random(seed)
    picked = [rng.choice(WORDS) for _ in range(n)]
    return [{"instruction": INSTRUCTION, "input": w, "output": w.upper()} for w in picked]


def write_dataset(out_dir: Path, n: int = ROWS) -> Path:
    """Write the dataset and its registry; returns the JSON Lines file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = out_dir / FILE_NAME
    data.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows(n)), encoding="utf-8")
    (out_dir / "dataset_info.json").write_text(json.dumps(DATASET_INFO, indent=2) + "\n", encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args(argv)
    print(f"wrote {args.rows} rows to {write_dataset(args.out_dir, args.rows)}")


if __name__ == "__main__":
    main()
