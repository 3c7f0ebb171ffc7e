"""Every benchmark script has a smoke mode that a test of the suite runs (one that no
BERT_TF_LONG_SMOKE condition leaves out of CI): a new script without one, or a smoke test dropped
or moved behind that condition, fails here (the libraries the scripts import are named)."""

import ast
import glob
import os

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
    tested |= scripts_run_in_the_suite(path)
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


def scripts_run_in_the_suite(path):
  """The scripts whose smoke.run("NAME", ...) a test function of PATH calls, leaving out the
  functions decorated with smoke.LONG (skipped unless BERT_TF_LONG_SMOKE=1)."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  names = set()
  for node in tree.body:
    if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
      continue
    if any(isinstance(d, ast.Attribute) and d.attr == "LONG" for d in node.decorator_list):
      continue
    for call in ast.walk(node):
      if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
          and call.func.attr == "run" and isinstance(call.func.value, ast.Name)
          and call.func.value.id == "smoke" and call.args
          and isinstance(call.args[0], ast.Constant)):
        names.add(call.args[0].value)
  return names


def test_a_smoke_test_behind_the_long_condition_does_not_count(tmp_path):
  path = tmp_path / "test_smoke_example.py"
  path.write_text(
      "from tests.benchmarks import smoke\n\n\n"
      "@smoke.LONG\ndef test_slow(tmp_path):\n  smoke.run(\"distillation\", tmp_path)\n\n\n"
      "def test_quick(tmp_path):\n  out, _ = smoke.run(\"main_job\", tmp_path, own_layout=True)\n",
      encoding="utf-8")
  assert scripts_run_in_the_suite(str(path)) == {"main_job"}
