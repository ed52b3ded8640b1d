"""Run by tests/unit/test_install.py as `python -I install_probe.py SITE`: imports radeonlab from SITE only
(not the checkout) and prints as JSON where it came from, whether `tests` got imported, and the files it
reads."""

import json
import sys

sys.path[0] = sys.argv[1]  # the install, in place of this script's folder (the checkout's tests/)

from importlib import resources  # noqa: E402

import radeonlab  # noqa: E402
import radeonlab.cli  # noqa: E402, F401
import radeonlab.sandbox.demo  # noqa: E402, F401
from radeonlab.sandbox import provision, wheels  # noqa: E402
from radeonlab.sandbox.standins import catalog  # noqa: E402

files = {
    # the sandbox names the deploy in pyinfra's `module.function` form: the file defining it
    "deploy": str(resources.files("radeonlab.deploy").joinpath("setup.py")),
    "inventory": provision.INVENTORY,
    "wheels.lock": str(wheels.LOCK_FILE),
    "tool wrapper": str(catalog.TOOL_WRAPPER),
    "demo spec": str(resources.files("radeonlab.jobs.examples").joinpath("demo.yaml")),
    "lf_args": str(resources.files("radeonlab.jobs.spec").joinpath("lf_args.json")),
    "gpu_env template": str(resources.files("radeonlab.roles").joinpath("gpu_env/templates")),
    "dashboard page": str(resources.files("radeonlab.dashboard").joinpath("static")),
}
tests_modules = sorted(m for m in sys.modules if m.split(".")[0] == "tests")
print(json.dumps({"package": radeonlab.__file__, "modules": tests_modules, "files": files}))
