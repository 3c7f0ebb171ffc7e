"""README.md stays true: its test command is CI's, its serving requests are the tested ones."""

import json
import os
import re
from tests import helpers

REPO_ROOT = helpers.REPO_ROOT


def _read(*parts):
  with open(os.path.join(REPO_ROOT, *parts), encoding="utf-8") as f:
    return f.read()


def _code_blocks(markdown):
  return re.findall(r"```[a-z]*\n(.*?)```", markdown, flags=re.S)


def test_ci_runs_the_readme_test_command():
  readme = _read("README.md")
  commands = [b.strip() for b in _code_blocks(readme) if "pytest" in b]
  assert commands, "README.md shows no test command"
  ci_lines = [line.strip() for line in _read(".ci", "run").splitlines()
              if line.strip() and not line.startswith("#")]
  assert commands[0] in ci_lines


def test_readme_sample_command_runs_the_sample_script():
  blocks = [b.strip() for b in _code_blocks(_read("README.md"))]
  assert any(b.endswith("data_prep/run_sample.py") and "pip install -e ." in b for b in blocks)
  assert os.path.exists(os.path.join(REPO_ROOT, "data_prep", "run_sample.py"))


def test_readme_serving_requests_are_the_tested_bodies():
  readme = _read("README.md")
  bodies = json.loads(_read("tests", "data", "serving_requests.json"))
  # The text model's requests (the classifier's is checked in tests/tasks/test_classifier_run.py).
  curl_bodies = [json.loads(m) for m in re.findall(r"models/bert:predict -d '(\{.*?\})'\n",
                                                   readme)]
  assert curl_bodies, "README.md shows no curl request"
  # Every documented request is one of the bodies tests/test_serving.py sends, and vice versa.
  assert sorted(map(json.dumps, curl_bodies)) == sorted(map(json.dumps, bodies.values()))
