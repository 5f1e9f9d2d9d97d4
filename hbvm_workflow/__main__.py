"""Command line of hbvm_workflow.

    python -m hbvm_workflow verify results/<study> [more folders]
    python -m hbvm_workflow list problems | methods | studies [--configfile FILE]

``--help`` after any subcommand says what it does and takes.
"""

from __future__ import annotations

import argparse
import sys

#: what ``list`` lists
LISTINGS = ("problems", "methods", "studies")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m hbvm_workflow",
        description="Check result stores, and list what a config can name and where its studies stand.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{verify,list}")
    v = sub.add_parser(
        "verify",
        help="read every store under the folders; report damaged ones (exit 1)",
        description="Read every run store and errors store under the folders, checking each chunk against "
        "the checksums recorded when it was written; name every damaged store and exit 1 if there is one.",
    )
    v.add_argument("folders", nargs="+", help="study results folders (results/<study>) or stores")
    ls = sub.add_parser(
        "list",
        help="the built-in problems, the methods and their keys, or the config's studies and their runs",
        description="problems: the built-in problems and their parameters; methods: the values of a method "
        "entry's `method` and the keys each takes; studies: the config's studies with their runs, and how many "
        "are computed (by the last solve), reused, failed, damaged or missing.",
    )
    ls.add_argument("what", nargs="?", default="studies", help="problems, methods or studies (default: studies)")
    ls.add_argument("--configfile", default=None, help="the config of `list studies` (default: config/config.yaml)")
    args = ap.parse_args(argv)
    if args.command == "verify":
        from .verify import verify

        return verify(args.folders)
    if args.command == "list":
        if args.what not in LISTINGS:
            from hbvm_core.errors import did_you_mean

            ls.error(
                f"unknown listing {args.what!r} (expected {', '.join(LISTINGS)}){did_you_mean(args.what, LISTINGS)}"
            )
        return list_command(args.what, args.configfile)
    return 2


def list_command(what: str, configfile: str | None) -> int:
    """Print the listing; a bad config is one line on stderr and exit 1."""
    import os

    from hbvm_core.errors import HBVMError

    from . import listing

    try:
        if what == "problems":
            lines = listing.problems()
        elif what == "methods":
            lines = listing.methods()
        else:
            if os.getcwd() not in sys.path:  # user problems (module:factory) next to the config, as in the workflow
                sys.path.insert(0, os.getcwd())
            lines = listing.studies(listing.load_config(configfile))
    except HBVMError as exc:
        print(f"bad config: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
