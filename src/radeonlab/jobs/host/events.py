"""List a job's TensorBoard event files (a `report_to: tensorboard` run writes them).

    python3 -m radeonlab.jobs.host.events JOB_DIR

transformers writes them under `logging_dir`, by default `<output_dir>/runs/<date>_<hostname>/` (4.57.6
training_args.py default_logdir), one folder per training start: a resumed attempt adds a folder, an earlier
fresh-start attempt's moved with its output to `output.attempt-K/`. The whole job folder is searched, so a
relative `logging_dir` is found too; one outside it is named. Prints one JSON object: {"files": [relative
paths], "logging_dir": the config's value or null, "report_to": the config's value}. Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys

from radeonlab.contract.jobdir import FILES, read_json

PREFIX = "events.out.tfevents."
SKIP = (FILES["data"], FILES["model"], FILES["code"], FILES["cache"], "export")  # never hold events


def event_files(job_dir: str) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(job_dir):
        if folder == job_dir:
            dirs[:] = [d for d in dirs if d not in SKIP]
        found += [os.path.relpath(os.path.join(folder, n), job_dir) for n in names if n.startswith(PREFIX)]
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    job_dir = os.path.abspath((argv if argv is not None else sys.argv[1:])[0])
    config = read_json(os.path.join(job_dir, FILES["config_json"]))
    print(
        json.dumps(
            {
                "files": event_files(job_dir),
                "logging_dir": config.get("logging_dir"),
                "report_to": config.get("report_to"),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
