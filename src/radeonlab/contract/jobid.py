"""Job ids: "<name>-<YYYYmmdd-HHMMSS>-<4 hex>" with the name reduced to a safe slug of [a-z0-9-].

The id becomes a folder name on the host and a shell argument, so whatever the user typed must come out
as a short, non-empty slug that can never be `..`, a path, an option (leading dash) or a glob.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from datetime import UTC, datetime

SLUG_MAX = 40  # keeps ids readable in `radeonlab list`; the timestamp + hex make them unique anyway
FALLBACK_NAME = "job"
_ID_RE = re.compile(r"^(?P<name>[a-z0-9]+(?:-[a-z0-9]+)*)-(?P<ts>\d{8}-\d{6})-(?P<hex>[0-9a-f]{4})$")


def sanitize_name(name: str) -> str:
    """Reduce any text to [a-z0-9-]: accents folded, other characters -> '-', no leading/trailing '-'."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", folded).strip("-")[:SLUG_MAX].strip("-")
    return slug or FALLBACK_NAME


def new_job_id(name: str, now: datetime | None = None, rand_hex: str | None = None) -> str:
    """A fresh job id for `name`; `now` (UTC) and `rand_hex` are parameters so tests can pin them."""
    when = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    tail = rand_hex if rand_hex is not None else secrets.token_hex(2)
    if not re.fullmatch(r"[0-9a-f]{4}", tail):
        raise ValueError(f"job id suffix must be 4 lowercase hex digits, got {tail!r}")
    return f"{sanitize_name(name)}-{when}-{tail}"


def is_job_id(text: str) -> bool:
    """True when `text` has the job id shape (safe to use as a folder name and a shell word)."""
    return _ID_RE.fullmatch(text) is not None


def parse_job_id(text: str) -> tuple[str, datetime, str]:
    """Split a job id into (name, creation time in UTC, hex suffix); ValueError when it is not one."""
    m = _ID_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a radeonlab job id: {text!r}")
    when = datetime.strptime(m["ts"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    return m["name"], when, m["hex"]
