"""Every benchmark script has a smoke mode that a test runs: a new script without one, or a
smoke test dropped, fails here (the libraries the scripts import are named)."""

import glob
import os
import re

from tests.helpers import REPO_ROOT

BENCHMARKS = os.path.join(REPO_ROOT, "benchmarks")
TESTS = os.path.join(REPO_ROOT, "tests", "benchmarks")
# Imported by the scripts, not run: no smoke mode of their own.
LIBRARIES = {"corpora", "curves", "harness", "peers", "render", "results_file", "serving_systems"}
# Scripts whose smoke run is tested in a file of their own (not through smoke.run).
OWN_TESTS = {"serving": "test_serving.py"}


def test_every_script_has_a_smoke_mode_and_a_test_that_runs_it():
  scripts = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(BENCHMARKS, "*.py")))
  tested = set()
  for path in glob.glob(os.path.join(TESTS, "test_smoke_*.py")):
    with open(path, encoding="utf-8") as f:
      tested |= set(re.findall(r'smoke\.run\("(\w+)"', f.read()))
  missing = []
  for script in scripts:
    if script in LIBRARIES:
      continue
    with open(os.path.join(BENCHMARKS, f"{script}.py"), encoding="utf-8") as f:
      if "smoke" not in f.read():
        missing.append(f"{script}.py has no --smoke")
    if script in OWN_TESTS:
      with open(os.path.join(TESTS, OWN_TESTS[script]), encoding="utf-8") as f:
        if '"--smoke"' not in f.read():
          missing.append(f"{OWN_TESTS[script]} runs no --smoke")
    elif script not in tested:
      missing.append(f"no tests/benchmarks/test_smoke_*.py runs {script}.py --smoke")
  assert not missing, "\n".join(missing)
  assert LIBRARIES <= set(scripts)  # a library renamed or removed: update the list
