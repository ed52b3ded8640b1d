"""SIMULATED stand-in for AMD's rocm_sdk module (radeonlab sandbox): no ROCm library."""

import importlib.metadata
import warnings

from rocm_sdk._dist_info import SELECTED_BY, SELECTED_TARGET, VERSION  # noqa: F401 - the module's API

__version__ = VERSION
PRELOADED: list[str] = []  # what initialize_process was asked to preload (SIMULATED: nothing is loaded)


def installed_targets():
    """The device targets whose rocm-sdk-device-<gfx> is installed."""
    prefix = "rocm-sdk-device-"
    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions()}
    return sorted(n[len(prefix) :] for n in names if n.startswith(prefix))


def initialize_process(preload_shortnames=(), check_version=None, fail_on_version_mismatch=False):
    """As AMD's: called by torch/_rocm_init.py; a ROCm version other than torch's warns (or fails)."""
    if check_version and check_version != VERSION:
        message = f"rocm_sdk {VERSION} is installed, torch was built for ROCm {check_version}"
        if fail_on_version_mismatch:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=2)
    PRELOADED[:] = list(preload_shortnames)
