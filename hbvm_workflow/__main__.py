"""Command line of hbvm_workflow: ``python -m hbvm_workflow verify results/<study> [more folders]``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hbvm_workflow")
    sub = ap.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="read every store under the folders; report damaged ones (exit 1)")
    v.add_argument("folders", nargs="+", help="study results folders (results/<study>) or stores")
    args = ap.parse_args(argv)
    if args.command == "verify":
        from .verify import verify

        return verify(args.folders)
    return 2


if __name__ == "__main__":
    sys.exit(main())
