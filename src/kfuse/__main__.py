"""``python -m kfuse info | demo | bench``: a small dispatcher over kfuse's command-line tools."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


def _info(argv: Sequence[str]) -> int:
    from kfuse import info

    return info.main(argv)


def _not_yet(name: str) -> Callable[[Sequence[str]], int]:
    def run(argv: Sequence[str]) -> int:
        print(f"kfuse {name}: not available yet")
        return 0

    return run


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "info": _info,
    "demo": _not_yet("demo"),
    "bench": _not_yet("bench"),
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
