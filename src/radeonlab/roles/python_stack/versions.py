"""Run by a venv's python on a workstation (read by the InstalledDistributions fact, passed with -c): prints
{"<name>": "<version>" | null} for the distribution names given as arguments. Standard library only."""

import importlib.metadata as m
import json
import sys


def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None


print(json.dumps({n: version(n) for n in sys.argv[1:]}))
