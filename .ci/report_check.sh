#!/usr/bin/env bash
# CI: the report as a new user gets it. The package installed the README's way (`pip install -e .`, no test
# extras) in a venv of its own, the README's main job in a copy of the repository, `snakemake --report
# report.html`, and the report opened in headless Chromium (Debian's chromium): each study's table and figure
# must render (.ci/report_view.py). Needs chromium on PATH (or CHROMIUM=...).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 MPLBACKEND=Agg
unset PYTHONPATH

# The working tree without what runs left behind.
tar -C "$repo" --exclude=./.venv --exclude=./results --exclude=./logs --exclude=./.snakemake \
  --exclude=./report.html -cf - . | tar -C "$work" -xf -
cd "$work"
python3 -m venv .venv
. .venv/bin/activate
pip install -q -e .

t0=$SECONDS
snakemake > main.log 2>&1 || { tail -20 main.log; exit 1; }
snakemake --report report.html > report.log 2>&1 || { tail -20 report.log; exit 1; }
# the default target's studies (the convergence studies; the other kinds are opt-in)
studies=$(python -c 'import yaml; s = yaml.safe_load(open("config/config.yaml"))["studies"]
print(" ".join(n for n, c in s.items() if c.get("kind", "convergence") == "convergence"))')
python "$repo/.ci/report_view.py" report.html $studies
echo "report check: main job, report and browser in $((SECONDS - t0)) s"
