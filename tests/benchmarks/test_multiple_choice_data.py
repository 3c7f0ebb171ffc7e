"""benchmarks/multiple_choice.py's task: the committed files are what --make_data makes from the
committed corpora, and each example's labelled choice is the sentence after its context."""

import importlib.util
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script():
  spec = importlib.util.spec_from_file_location(
      "benchmark_multiple_choice", os.path.join(REPO, "benchmarks", "multiple_choice.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_committed_data_is_made_again_from_the_corpora():
  script = _script()
  made = script.make_examples(script.corpora.paths(), 2200)
  committed = []
  for split in ("train", "dev"):
    with open(script.DATA[split], encoding="utf-8") as f:
      committed += [json.loads(line) for line in f]
  assert len(committed) == 2200
  assert [{k: v for k, v in row.items() if k != "id"} for row in committed] == made
  following = {}
  for path in script.corpora.paths():
    for document in script.corpora.documents(path):
      for a, b in zip(document, document[1:]):
        following.setdefault(a, set()).add(b)
  for row in committed:
    assert len(row["choices"]) == 4 and len(set(row["choices"])) == 4
    assert row["choices"][row["label"]] in following[row["context"]]
