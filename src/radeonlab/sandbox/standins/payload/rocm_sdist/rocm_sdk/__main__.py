"""SIMULATED `rocm-sdk` command (radeonlab sandbox): `targets`, `version`."""

import sys

import rocm_sdk


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["targets"]:
        print(";".join(rocm_sdk.installed_targets()))
    elif args[:1] == ["version"]:
        print(rocm_sdk.__version__)
    else:
        print("usage: rocm-sdk targets|version (SIMULATED radeonlab sandbox stand-in)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
