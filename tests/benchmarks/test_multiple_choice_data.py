"""benchmarks/multiple_choice.py's task: the committed files are what --make_data makes from the
committed corpora, and each example's labelled choice is the sentence after its context; and
--runs_from_printed reads the per-run table a stopped run printed."""

import importlib.util
import json
import os

import pytest

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


def test_runs_from_printed_reads_the_per_run_table_a_stopped_run_printed(tmp_path):
  """--runs_from_printed: the rows of the per-run table, other lines (the header, logs, the
  medians table) ignored; a file without such rows is refused."""
  script = _script()
  printed = tmp_path / "out.txt"
  printed.write_text("| seed | system | dev accuracy | training examples/s | wall s |\n"
                     "| --- | --- | --: | --: | --: |\n| 1 | ours | 0.4870 | 2.40 | 1128 |\n"
                     "a log line\n| 1 | hf | 0.4910 | 1.62 | 1786 |\n"
                     "| ours | 0.4870 | 2.40 | 1.48x examples/s, -0.4 accuracy points |\n")
  assert script.printed_runs(str(printed)) == [
      dict(seed=1, system="ours", accuracy=0.487, examples_per_second=2.4, wall_seconds=1128.0),
      dict(seed=1, system="hf", accuracy=0.491, examples_per_second=1.62, wall_seconds=1786.0)]
  empty = tmp_path / "empty.txt"
  empty.write_text("| seed | system | dev accuracy | training examples/s | wall s |\n")
  with pytest.raises(SystemExit, match="has no printed runs"):
    script.printed_runs(str(empty))
