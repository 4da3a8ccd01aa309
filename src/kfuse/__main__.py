"""``python -m kfuse info | demo | bench | campaign``: a dispatcher over kfuse's commands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


def _info(argv: Sequence[str]) -> int:
    from kfuse import info

    return info.main(argv)


def _demo(argv: Sequence[str]) -> int:
    from kfuse import demo

    return demo.main(argv)


def _bench(argv: Sequence[str]) -> int:
    """The benchmark suite lives in the source tree (it imports torch, CuPy and matplotlib,
    which kfuse itself does not need): run it from a checkout."""
    import runpy
    from pathlib import Path

    script = Path.cwd() / "benchmarks" / "run.py"
    if not script.exists():
        print("kfuse bench: run it from a kfuse source checkout (benchmarks/run.py was not "
              f"found under {Path.cwd()})")
        return 2
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def _campaign(argv: Sequence[str]) -> int:
    from kfuse.campaign import cli

    return cli.main(argv)


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "info": _info,
    "demo": _demo,
    "bench": _bench,
    "campaign": _campaign,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command named by ``argv[0]`` with the rest of ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS or args[0] in ("-h", "--help"):
        print(f"usage: python -m kfuse {{{'|'.join(COMMANDS)}}} [args...]")
        return 0 if args and args[0] in ("-h", "--help") else 2
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
