"""``kfuse`` (also ``python -m kfuse``): info | demo | bench | campaign.

Each command has its own ``--help``; a bad command line is one line on stderr and exit status
2 (kfuse.cli.parser).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from kfuse.cli.parser import Parser, UsageError


def _info(argv: Sequence[str]) -> int:
    p = Parser(
        prog="kfuse info",
        description="Versions, where the CUDA driver, NVRTC and "
        "CUPTI were found, each device's properties, and the KFUSE_* settings in "
        "effect. Exits 0 on a machine without a GPU, and says so.",
    )
    p.add_argument("--json", action="store_true", help="print the same facts as JSON")
    args = p.parse_args(argv)
    from kfuse.cli import info

    return info.main(as_json=args.json)


def _demo(argv: Sequence[str]) -> int:
    p = Parser(
        prog="kfuse demo",
        description="Run an RMSNorm fusion on the GPU (torch), or on "
        "the host emulator where there is none, and check it against the eager "
        "reference. Exits 1 if they differ.",
    )
    p.parse_args(argv)
    from kfuse.cli import demo

    return demo.main(())


def _bench(argv: Sequence[str]) -> int:
    """The benchmark suite lives in the source tree (it imports torch, CuPy and matplotlib,
    which kfuse itself does not need): run it from a checkout."""
    import runpy
    from pathlib import Path

    script = Path.cwd() / "benchmarks" / "run.py"
    if not script.exists():
        raise UsageError(
            "bench: run it from a kfuse source checkout (benchmarks/run.py was not "
            f"found under {Path.cwd()})"
        )
    if not any(a in ("-h", "--help") for a in argv):
        from kfuse.cli import bench

        lacking = bench.missing()
        if lacking is not None:
            # Not a usage error, but the same contract: one line, status 2, no traceback.
            raise UsageError(
                f"bench needs an NVIDIA GPU and torch with CUDA: {lacking}; "
                "`kfuse demo` runs a fusion on the host emulator"
            )
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def _campaign(argv: Sequence[str]) -> int:
    from kfuse.cli import campaign

    return campaign.main(argv)


COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "info": (_info, "versions, CUDA libraries and devices (--json)"),
    "demo": (_demo, "run and check an RMSNorm fusion on the GPU or the emulator"),
    "bench": (_bench, "the benchmark suite (from a source checkout; --help for its options)"),
    "campaign": (_campaign, "a property campaign of random fusions on every GPU (--help)"),
}


def _usage() -> str:
    import kfuse

    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    return (
        f"usage: kfuse <command> [options]   (kfuse {kfuse.__version__})\n\n"
        f"commands:\n{rows}\n\nkfuse <command> --help describes a command's options."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command named by ``argv[0]`` with the rest of ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(_usage())
        return 0
    if args[:1] == ["--version"]:
        import kfuse

        print(f"kfuse {kfuse.__version__}")
        return 0
    try:
        if not args or args[0] not in COMMANDS:
            given = f"unknown command {args[0]!r}" if args else "no command given"
            raise UsageError(f"{given}; commands: {', '.join(COMMANDS)} (kfuse --help)")
        return COMMANDS[args[0]][0](args[1:])
    except UsageError as exc:
        print(f"kfuse: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help of a command's parser
        return int(exc.code or 0)
