"""An interactive chat with a job's adapter, on a terminal of the workstation (`radeonlab chat JOB`).

    <venv>/bin/python -m radeonlab.jobs.host.chat JOB_DIR [--adapter DIR] [--max-new-tokens N]
                                                          [--compare-base]

Run by the job's TRAINING venv on an SSH pseudo-terminal, in a login shell (profile.d: the card's
environment). It loads LLaMA-Factory's own chat model, the one `llamafactory-cli chat` runs, with the training
run's base model, template and finetuning type, and the job's adapter; generation settings are
LLaMA-Factory's defaults (sampling) unless given. The loop is `llamafactory-cli chat`'s (0.9.5
chat/chat_model.py run_chat: `clear` forgets the conversation, `exit` ends it) with the keys users expect of
a terminal program, where llamafactory-cli would end with a traceback:
- Ctrl-D on an empty line ends the chat; Ctrl-C stops an answer being written (or clears the line typed);
- line editing and history (readline), kept across sessions in the job's cache/chat_history.
--compare-base answers each turn twice: with the adapter, then the base model alone (its own conversation).
The environment comes from the job folder and the host record (no secrets, nothing on the command line):
HF_HOME under the job's cache, HF_HUB_CACHE the host's model cache, HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from radeonlab.contract.jobdir import FILES, read_json
from radeonlab.contract.records import HOST_RECORD_PATH

HISTORY = "chat_history"  # in the job's cache folder
HISTORY_LINES = 1000
BANNER = (
    "chat with {job}'s adapter (base model {model}){compare}.\n"
    "Ctrl-D or `exit` ends it, `clear` forgets the conversation, Ctrl-C stops an answer."
)


def job_env(job_dir: str) -> dict[str, str]:
    """What a venv tool of this job runs with (jobs/track/onhost.py venv_env, read here on the host)."""
    cache = os.path.join(job_dir, FILES["cache"])
    env = {
        "HF_HOME": os.path.join(cache, "hf"),
        "MPLCONFIGDIR": os.path.join(cache, "mpl"),
        "HF_HUB_OFFLINE": "1",
        # a conversation, not a log: the libraries' loading chatter and generation warnings stay quiet
        "LLAMAFACTORY_VERBOSITY": os.environ.get("LLAMAFACTORY_VERBOSITY", "WARN"),
        "TRANSFORMERS_VERBOSITY": os.environ.get("TRANSFORMERS_VERBOSITY", "error"),
    }
    model_cache = read_json(HOST_RECORD_PATH).get("model_cache")
    if model_cache:
        env["HF_HUB_CACHE"] = str(model_cache)
    return env


def history(job_dir: str) -> str | None:
    """Line editing and history for input() (readline), loaded from and saved to the job's cache."""
    try:
        import readline
    except ImportError:
        return None
    path = os.path.join(job_dir, FILES["cache"], HISTORY)
    with contextlib.suppress(OSError):  # no history yet
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LINES)
    return path


def save_history(path: str | None) -> None:
    if path is None:
        return
    import readline

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        readline.write_history_file(path)
    except OSError:
        pass  # history is a convenience


def stream(model: Any, messages: list[dict[str, str]], label: str) -> str:
    """Print the answer as it is generated; Ctrl-C stops it (what was written so far is kept)."""
    print(f"{label}: ", end="", flush=True)
    response = ""
    try:
        for piece in model.stream_chat(messages):
            print(piece, end="", flush=True)
            response += piece
    except KeyboardInterrupt:
        print(" [stopped]", end="")
    print(flush=True)
    return response


def loop(model: Any, base: Any | None) -> None:
    turns: list[dict[str, str]] = []
    base_turns: list[dict[str, str]] = []
    while True:
        try:
            query = input("\nUser: ")
        except EOFError:  # Ctrl-D
            print()
            return
        except KeyboardInterrupt:  # Ctrl-C at the prompt: a new prompt, as in a shell
            print("^C")
            continue
        if query.strip() == "exit":
            return
        if query.strip() == "clear":
            turns, base_turns = [], []
            print("History has been removed.")
            continue
        turns.append({"role": "user", "content": query})
        turns.append({"role": "assistant", "content": stream(model, turns, "Assistant")})
        if base is not None:
            base_turns.append({"role": "user", "content": query})
            base_turns.append({"role": "assistant", "content": stream(base, base_turns, "Base model")})


def sampling(temperature: float | None, max_new_tokens: int | None) -> dict[str, Any]:
    """LLaMA-Factory's generating arguments: its defaults (sampling) unless a temperature is given; 0 is
    greedy decoding (transformers refuses to sample at a temperature of 0)."""
    if temperature is None:
        return {"max_new_tokens": max_new_tokens}
    if temperature == 0:
        return {"max_new_tokens": max_new_tokens, "do_sample": False}
    return {"max_new_tokens": max_new_tokens, "do_sample": True, "temperature": temperature}


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:  # Ctrl-C while the model loads
        print("\ninterrupted", flush=True)
        return 130


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chat")
    parser.add_argument("job_dir")
    parser.add_argument("--adapter", default=None, help="default: the job's output/")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--compare-base", action="store_true")
    parser.add_argument("--temperature", type=float, default=None, help="0: greedy decoding")
    args = parser.parse_args(argv)
    os.environ.update(job_env(args.job_dir))

    from radeonlab.jobs.host.tryout import chat_args, read_config

    cfg = read_config(os.path.join(args.job_dir, FILES["config"]))
    adapter = args.adapter or os.path.join(args.job_dir, FILES["output"])
    from llamafactory.chat import ChatModel

    generation = sampling(args.temperature, args.max_new_tokens)
    model = ChatModel(chat_args(cfg, adapter, **generation))
    base = ChatModel(chat_args(cfg, None, **generation)) if args.compare_base else None
    job = read_json(os.path.join(args.job_dir, FILES["job"])).get("id") or os.path.basename(args.job_dir)
    compare = "; each answer then from the base model alone" if base else ""
    print(BANNER.format(job=job, model=cfg.get("model_name_or_path"), compare=compare), flush=True)
    saved = history(args.job_dir)
    try:
        loop(model, base)
    finally:
        save_history(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
